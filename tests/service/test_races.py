"""Races in the server's state changes, found by a concurrency review (session 15).

Each test interleaves two writers deterministically (a hook in the first writer lets the second
one run to its commit inside the first one's window) and checks the outcome that any serial
order of the two would give. Each failed before its fix: writes outside Runtimes.mutate now
take the study's lock (``owned(..., lock=True)``), the reaper and the dispatcher skip a study
that fails instead of ending their pass, the local owner is created in a savepoint, API keys
are checked in a read session, and a repaired job gets a new name under the lock.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import update

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service.api import deps
from service.api.app import create_app, reap_expired_leases
from service.dispatch import Dispatcher
from service.settings import Settings
from service.store.database import transaction
from service.store.models import Trial, utcnow

from .helpers import candidates


@pytest.fixture
def apps() -> Iterator[Any]:
    """Builds (app, client) pairs, "server processes" sharing one database; no lifespan: the
    reaper and dispatcher threads stay off, the tests drive them."""
    made: list[tuple[Any, TestClient]] = []

    def build(database_url: str, tmp_path: Path, **settings: Any) -> tuple[Any, TestClient]:
        app = create_app(Settings(database_url=database_url, data_dir=tmp_path,
                                  **({"auth": "none"} | settings)))
        client = TestClient(app, raise_server_exceptions=False)  # a 500 is an answer
        made.append((app, client))
        return app, client

    yield build
    for app, client in made:
        client.close()
        app.state.sessions.kw["bind"].dispose()
        if app.state.dispatcher is not None:
            app.state.dispatcher.redis.close()


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_new_dispatch_is_not_overwritten_by_a_top_up_closing_the_old_one(
        pg_database_url, tmp_path, apps, redis_url):
    """service/dispatch.py Dispatcher._ask writes ``{**old plan, "status": "done"}`` from the
    study row it read under the study's lock, but POST /dispatch writes the plan without that
    lock: on PostgreSQL a new dispatch committed inside the top-up's window is overwritten,
    although its request was answered ``running``. Serially, either order ends ``running``
    with the new plan (top-up first: done, then replaced; dispatch first: the top-up sees a
    budget and enqueues)."""
    app1, c1 = apps(pg_database_url, tmp_path / "a", redis_url=redis_url)  # runs the dispatcher
    _, c2 = apps(pg_database_url, tmp_path / "b", redis_url=redis_url)     # another API process
    dispatcher = app1.state.dispatcher
    dispatcher.redis.flushall()
    body = {"name": "race", "candidates": candidates(60).tolist(), "objective": "function:branin",
            "engine": {"strategy": "bbkb", "mode": "async", "seed": 0}}
    sid = c1.post("/v1/studies", json=body).json()["id"]
    assert c1.post(f"/v1/studies/{sid}/dispatch",
                   json={"n_evaluations": 1, "parallelism": 1}).status_code == 200
    assert dispatcher.top_up(sid) == 1
    job = dispatcher.queue.jobs[0].args[0]
    done = c1.post(f"/v1/studies/{sid}/dispatch/complete", json={
        "trial_id": job["trial_id"], "value": 1.0, "worker_id": job["worker_id"]})
    assert done.status_code == 200 and done.json()["next"] is None  # the budget is spent
    assert c1.get(f"/v1/studies/{sid}/dispatch").json()["status"] == "running"  # not marked yet

    # the user starts a new dispatch (on the other process) while the dispatcher's top-up,
    # which will mark the old one done, holds the study's lock
    ask = dispatcher._ask
    started: dict[str, Any] = {}

    def ask_with_a_concurrent_dispatch(session, runtime, study):  # type: ignore[no-untyped-def]
        thread, started["out"] = _in_thread(lambda: c2.post(
            f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 3, "parallelism": 1}))
        started["thread"] = thread
        thread.join(timeout=3)  # a request that waited for the study's lock stays blocked
        return ask(session, runtime, study)

    dispatcher._ask = ask_with_a_concurrent_dispatch
    dispatcher.top_up(sid)
    dispatcher._ask = ask
    started["thread"].join(timeout=30)
    answer = started["out"]["value"]
    assert answer.status_code == 200, answer.text
    assert (answer.json()["status"], answer.json()["n_evaluations"]) == ("running", 3)

    status = c1.get(f"/v1/studies/{sid}/dispatch").json()
    assert (status["status"], status["n_evaluations"]) == ("running", 3), \
        f"the new dispatch was lost: {status}"
    assert dispatcher.top_up(sid) == 1  # and it evaluates


def test_a_new_dispatch_survives_a_concurrent_top_up_without_hooks(pg_database_url, tmp_path,
                                                                     apps, redis_url):
    """The same race with no hook: a top-up (dispatcher of one process) and POST /dispatch
    (another process) released together by a barrier, repeated. Any serial order ends with
    the new dispatch ``running``; on PostgreSQL about every other attempt ends ``done``."""
    app1, c1 = apps(pg_database_url, tmp_path / "a", redis_url=redis_url)
    _, c2 = apps(pg_database_url, tmp_path / "b", redis_url=redis_url)
    dispatcher = app1.state.dispatcher
    body = {"name": "race", "candidates": candidates(300).tolist(),
            "objective": "function:branin", "engine": {"strategy": "bbkb", "mode": "async"}}
    sid = c1.post("/v1/studies", json=body).json()["id"]
    plan = {"n_evaluations": 1, "parallelism": 1}
    for attempt in range(40):
        dispatcher.redis.flushall()
        assert c1.post(f"/v1/studies/{sid}/dispatch", json=plan).status_code == 200
        assert dispatcher.top_up(sid) == 1
        job = dispatcher.queue.jobs[0].args[0]
        assert c1.post(f"/v1/studies/{sid}/dispatch/complete", json={
            "trial_id": job["trial_id"], "value": 1.0, "worker_id": job["worker_id"],
            "next": False}).status_code == 200  # the budget is spent, not marked done yet
        together = threading.Barrier(2)
        top_up = _in_thread(lambda b=together: (b.wait(), dispatcher.top_up(sid)))
        start = _in_thread(lambda b=together: (b.wait(),
                                               c2.post(f"/v1/studies/{sid}/dispatch",
                                                       json=plan))[1])
        for thread, _ in (top_up, start):
            thread.join(timeout=30)
        assert start[1]["value"].status_code == 200
        status = c1.get(f"/v1/studies/{sid}/dispatch").json()
        assert status["status"] == "running", f"attempt {attempt}: new dispatch lost: {status}"
        dispatcher.top_up(sid)  # finish the new dispatch before the next attempt
        for queued in dispatcher.queue.jobs:
            c1.post(f"/v1/studies/{sid}/dispatch/complete", json={
                "trial_id": queued.args[0]["trial_id"], "value": 0.5,
                "worker_id": queued.args[0]["worker_id"], "next": False})
        dispatcher.top_up(sid)
        assert c1.get(f"/v1/studies/{sid}/dispatch").json()["status"] == "done"


def test_deleting_a_study_with_leased_trials_does_not_stop_the_lease_reaper(database_url,
                                                                            tmp_path, apps):
    """service/api/app.py reap_expired_leases: expired_leases lists running trials of every
    study, deleted ones too, and Runtimes.mutate raises NotFound for a deleted study, which
    ends the pass: the trials of the other studies are never returned to the pool (their
    workers died, the study stalls). A deleted study's trials never stop being running and
    expired, so this repeats at every pass for good."""
    app, client = apps(database_url, tmp_path)
    body = {"candidates": candidates(60).tolist(), "lease_seconds": 60,
            "engine": {"strategy": "bbkb", "mode": "async", "seed": 0}}
    gone = client.post("/v1/studies", json=body | {"name": "gone"}).json()["id"]
    alive = client.post("/v1/studies", json=body | {"name": "alive"}).json()["id"]
    for sid in (gone, alive):
        r = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 1})
        assert r.status_code == 200 and len(r.json()["trials"]) == 1
    assert client.delete(f"/v1/studies/{gone}").status_code == 204  # its worker still runs
    now = utcnow()
    app.state.heard_since = now - timedelta(hours=1)  # heard for longer than a lease (_heard_out)
    with transaction(app.state.sessions) as session:  # both workers died: the leases ran out
        for sid, ago in ((gone, 120), (alive, 60)):
            session.execute(update(Trial).where(Trial.study_id == sid).values(
                lease_expires_at=now - timedelta(seconds=ago)))

    errors = []
    for _ in range(2):  # two passes of the reaper loop, which logs a failed pass and goes on
        try:
            reap_expired_leases(app)
        except Exception as exc:  # noqa: BLE001 - NotFound for the deleted study, every pass
            errors.append(exc)

    trial = client.get(f"/v1/studies/{alive}/trials").json()["trials"][0]
    assert trial["status"] == "pending", "the live study's lost lease was never reaped"
    assert not errors, errors  # (whichever study the pass meets first)


def test_concurrent_uploads_of_the_candidates_answer_409_not_500(pg_database_url, tmp_path,
                                                                  apps, monkeypatch):
    """service/api/routes/studies.py _attach checks ``awaiting_candidates`` and inserts the
    blocks without locking the study: on PostgreSQL two uploads (a client retrying a slow
    upload) both pass the check, and the second insert fails on the blocks' primary key
    (IntegrityError: a 500) instead of the documented 409."""
    _, client = apps(pg_database_url, tmp_path)
    sid = client.post("/v1/studies", json={"name": "up", "upload": True}).json()["id"]
    import io

    buffer = io.BytesIO()
    np.save(buffer, candidates(200))
    data = buffer.getvalue()

    from service import studies as studies_module
    attach = studies_module.attach_candidates
    both_checked = threading.Barrier(2, timeout=3)

    def attach_after_both_checked(session, study, matrix):  # type: ignore[no-untyped-def]
        try:
            both_checked.wait()  # both requests read "awaiting_candidates"
        except threading.BrokenBarrierError:
            pass  # (the other request waits for this one: no race to provoke)
        attach(session, study, matrix)

    monkeypatch.setattr(studies_module, "attach_candidates", attach_after_both_checked)
    uploads = [_in_thread(lambda: client.put(
        f"/v1/studies/{sid}/candidates", content=data,
        headers={"content-type": "application/octet-stream"})) for _ in range(2)]
    codes = []
    for thread, out in uploads:
        thread.join(timeout=60)
        codes.append(out["value"].status_code)
    assert sorted(codes) == [200, 409], codes


def test_first_concurrent_requests_without_auth_do_not_answer_500(pg_database_url, tmp_path,
                                                                  apps, monkeypatch):
    """service/auth.py owner_id_for (BBKB_AUTH=none: every process's first request) selects
    the "local" owner, then inserts it when absent: on PostgreSQL two first requests (two API
    processes, or two threads of one) both insert, and the second fails on owners.name's
    unique constraint (IntegrityError: a 500)."""
    _, c1 = apps(pg_database_url, tmp_path / "a")
    _, c2 = apps(pg_database_url, tmp_path / "b")
    real = deps.owner_id_for
    first = threading.Lock()

    def slow_commit(session, name):  # type: ignore[no-untyped-def]
        owner = real(session, name)
        if first.acquire(blocking=False):  # the first request's insert stays uncommitted
            threading.Event().wait(0.5)    # a moment (the other request reads meanwhile)
        return owner

    monkeypatch.setattr(deps, "owner_id_for", slow_commit)
    requests = [_in_thread(lambda c=c: c.get("/v1/studies")) for c in (c1, c2)]
    codes = []
    for thread, out in requests:
        thread.join(timeout=30)
        codes.append(out["value"].status_code)
    assert codes == [200, 200], codes


def test_reads_with_an_api_key_do_not_wait_for_a_writer_on_sqlite(tmp_path, apps):
    """service/api/deps.py _owner authenticates in ``transaction(state.sessions)``: on SQLite
    that is BEGIN IMMEDIATE, the database's write lock. With API keys (BBKB_AUTH=keys, the
    default) every request, every GET too, waits for any writer (a batch being opened, another
    process's tell) and answers 503 after the busy timeout, though reads are documented to run
    in a WAL snapshot that never waits for a writer (test_read_sessions checks it without
    keys only)."""
    import sqlite3

    from service.auth import create_key

    db = tmp_path / "k.db"
    app, client = apps(f"sqlite:///{db}", tmp_path, auth="keys", database_busy_seconds=0.5)
    with transaction(app.state.sessions) as session:
        key = create_key(session, "lab")
    headers = {"Authorization": f"Bearer {key}"}
    sid = client.post("/v1/studies", headers=headers, json={
        "name": "k", "candidates": candidates(60).tolist()}).json()["id"]
    writer = sqlite3.connect(db, isolation_level=None, timeout=0.5)
    writer.execute("BEGIN IMMEDIATE")  # another process's write transaction
    try:
        for path in (f"/v1/studies/{sid}", f"/v1/studies/{sid}/trials", "/v1/studies"):
            response = client.get(path, headers=headers)
            assert response.status_code == 200, (path, response.status_code, response.text)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_two_processes_repairing_a_lost_job_enqueue_it_once(pg_database_url, tmp_path, apps,
                                                            redis_url, monkeypatch):
    """service/dispatch.py Dispatcher.repair: each server process's dispatcher finds the
    running trials whose job Redis lost, then re-enqueues them under the same job id, with no
    check under the study's lock that another process has not just done it. RQ queues an id
    twice (two workers run it): the trial is evaluated twice, and as both jobs carry the same
    worker id, complete_and_next hands both the same next trial, so the duplicate chain goes on
    (and over the dispatch's parallelism) until two results differ."""
    app1, c1 = apps(pg_database_url, tmp_path / "a", redis_url=redis_url)
    app2, _ = apps(pg_database_url, tmp_path / "b", redis_url=redis_url)
    d1, d2 = app1.state.dispatcher, app2.state.dispatcher
    d1.redis.flushall()
    body = {"name": "repair", "candidates": candidates(60).tolist(),
            "objective": "function:branin", "engine": {"strategy": "bbkb", "mode": "async"}}
    sid = c1.post("/v1/studies", json=body).json()["id"]
    assert c1.post(f"/v1/studies/{sid}/dispatch",
                   json={"n_evaluations": 5, "parallelism": 1}).status_code == 200
    assert d1.top_up(sid) == 1
    d1.redis.flushall()  # Redis restarted: the job is gone, its trial runs in the database
    with transaction(app1.state.sessions) as session:
        session.execute(update(Trial).where(Trial.study_id == sid).values(
            started_at=utcnow() - timedelta(seconds=60)))

    lost = Dispatcher._lost
    both_looked = threading.Barrier(2, timeout=3)

    def lost_then_wait(self, study_id, jobs):  # type: ignore[no-untyped-def]
        found = lost(self, study_id, jobs)
        both_looked.wait()  # both dispatchers' periodic repair passes look at once
        return found

    monkeypatch.setattr(Dispatcher, "_lost", lost_then_wait)
    repairs = [_in_thread(lambda d=d: d.repair(sid)) for d in (d1, d2)]
    for thread, _ in repairs:
        thread.join(timeout=30)
    monkeypatch.undo()
    queued = d1.queue.job_ids
    assert len(queued) == 1, f"the lost job was enqueued {len(queued)} times: {queued}"
