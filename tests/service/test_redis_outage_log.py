"""A Redis that does not answer is said once, as a warning, when the server starts or the
outage begins, and once more when it answers again: the dispatcher logged a traceback at every
pass of every dispatching study (every 0.5 s, or at each result)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

import numpy as np
from fastapi.testclient import TestClient

from service import dispatch
from service.api.app import create_app
from service.processes import RedisProcess, free_port
from service.settings import Settings


def _dispatching(client: TestClient, name: str) -> int:
    """A study of 30 candidates dispatching 4 evaluations of Branin, 2 at a time; its id."""
    body = {"name": name, "candidates": np.random.default_rng(0).random((30, 2)).tolist(),
            "objective": "function:branin", "engine": {"strategy": "uniform", "seed": 0}}
    sid = client.post("/v1/studies", json=body).json()["id"]
    answer = client.post(f"/v1/studies/{sid}/dispatch",
                         json={"n_evaluations": 4, "parallelism": 2})
    assert answer.status_code == 200, answer.text
    return sid


def test_a_redis_outage_is_one_warning_and_its_end_one_line(tmp_path, caplog, monkeypatch):
    # the trials handed out while Redis was down are enqueued by the repair after its grace
    monkeypatch.setattr(dispatch, "REPAIR_GRACE_SECONDS", 0.5)
    port = free_port()
    redis = RedisProcess(port=port)
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'o.db'}", auth="none",
                              redis_url=redis.url, data_dir=tmp_path))
    dispatcher = app.state.dispatcher
    stop = threading.Event()
    client = TestClient(app)  # no `with`: the lifespan's dispatcher stays off, driven here
    try:
        with caplog.at_level(logging.INFO, logger="bbkb"):
            _dispatching(client, "down")  # the dispatch waits for Redis
            loop = threading.Thread(target=dispatcher.loop, args=(stop,),
                                    kwargs={"interval": 0.05})
            loop.start()
            try:
                time.sleep(1.0)  # about 20 passes without Redis
                redis.start()
                deadline = time.monotonic() + 30
                while dispatcher.queue.count == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert dispatcher.queue.count > 0  # jobs enqueued once it answers
            finally:
                stop.set()
                loop.join(30)
                redis.stop()
    finally:
        client.close()
        app.state.sessions.kw["bind"].dispose()
        dispatcher.close()
    records = [r for r in caplog.records if r.name.startswith("bbkb.dispatch")]
    down = [r for r in records if "Redis does not answer" in r.getMessage()]
    assert len(down) == 1 and down[0].levelno == logging.WARNING, caplog.text
    assert [r for r in records if r.exc_info] == []  # no traceback per pass
    assert sum("Redis answers again" in r.getMessage() for r in records) == 1


def test_one_studys_redis_error_does_not_stop_the_others(redis_url, tmp_path, monkeypatch,
                                                          caplog):
    """Only a Redis that does not answer (ConnectionError, TimeoutError) is an outage that
    ends a dispatch pass: another Redis error of one study (a ResponseError) skipped every
    later study, for good if it persisted. (The studies and their top-ups are stubbed: what
    is tested is the pass's handling of their errors.)"""
    from redis import ResponseError

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'e.db'}", auth="none",
                              redis_url=redis_url, data_dir=tmp_path))
    dispatcher = app.state.dispatcher
    topped: list[int] = []

    def top_up(study_id: int) -> int:
        topped.append(study_id)
        if study_id == 1:
            raise ResponseError("WRONGTYPE Operation against a key holding the wrong value")
        return 0

    monkeypatch.setattr(dispatcher, "studies", lambda: [1, 2])
    monkeypatch.setattr(dispatcher, "top_up", top_up)
    monkeypatch.setattr(dispatcher, "repair", lambda study_id: None)
    stop = threading.Event()
    loop = threading.Thread(target=dispatcher.loop, args=(stop,), kwargs={"interval": 0.02})
    try:
        with caplog.at_level(logging.INFO, logger="bbkb"):
            loop.start()
            deadline = time.monotonic() + 10
            while topped.count(2) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
            stop.set()
            loop.join(10)
    finally:
        app.state.sessions.kw["bind"].dispose()
        dispatcher.close()
    assert topped.count(2) >= 3
    assert "Redis does not answer" not in caplog.text
    assert "dispatch pass of study 1 failed" in caplog.text


def test_a_database_outage_is_one_warning_and_its_end_one_line(redis_url, tmp_path, caplog):
    """The dispatcher logged a traceback at every pass (every 0.5 s) while its database did not
    answer: 70 in a 35 s PostgreSQL outage. Here SQLite's write lock is held, so that a top-up
    (which writes the trials it hands out) cannot commit."""
    database = tmp_path / "d.db"
    app = create_app(Settings(database_url=f"sqlite:///{database}", auth="none",
                              redis_url=redis_url, data_dir=tmp_path, database_busy_seconds=0.1))
    dispatcher = app.state.dispatcher
    dispatcher.queue.empty()
    stop = threading.Event()
    client = TestClient(app)  # no `with`: the lifespan's dispatcher stays off, driven here
    loop = threading.Thread(target=dispatcher.loop, args=(stop,), kwargs={"interval": 0.05})
    try:
        _dispatching(client, "locked")
        with caplog.at_level(logging.INFO, logger="bbkb"):
            lock = sqlite3.connect(database, isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")
            loop.start()
            time.sleep(1.0)  # about 20 passes that cannot write
            assert dispatcher.queue.count == 0
            lock.execute("COMMIT")
            lock.close()
            deadline = time.monotonic() + 30
            while dispatcher.queue.count < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert dispatcher.queue.count == 2  # dispatched once it answers
    finally:
        stop.set()
        if loop.is_alive():
            loop.join(30)
        client.close()
        app.state.sessions.kw["bind"].dispose()
        dispatcher.queue.empty()
        dispatcher.close()
    records = [r for r in caplog.records if r.name.startswith("bbkb.dispatch")]
    down = [r for r in records if "the database does not answer" in r.getMessage()]
    assert len(down) == 1 and down[0].levelno == logging.WARNING, caplog.text
    assert "database is locked" in down[0].getMessage()
    assert [r for r in records if r.exc_info] == []  # no traceback per pass
    assert sum("the database answers again" in r.getMessage() for r in records) == 1
