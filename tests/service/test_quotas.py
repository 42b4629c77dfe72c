"""Per-owner quotas: BBKB_OWNER_MAX_STUDIES bounds the studies an owner holds and
BBKB_OWNER_MAX_PARALLELISM the parallel evaluations its running dispatches ask of the shared
workers; each is a 409 that says what to do, other owners are not affected, and two requests of
one owner at once cannot both pass on the same count."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service import quotas
from service.api.app import create_app
from service.auth import create_key
from service.settings import Settings
from service.store.database import transaction

BODY = {"candidates": np.random.default_rng(0).random((40, 2)).tolist(),
        "objective": "function:branin", "engine": {"strategy": "bbkb", "seed": 0}}


@contextmanager
def _app(database_url: str, tmp_path, redis_url: str | None = None,  # type: ignore[no-untyped-def]
         **limits: int) -> Iterator[tuple[TestClient, dict, dict]]:
    """A server with keys and ``limits``, and the headers of two owners' keys. No lifespan: the
    dispatcher thread stays off (nothing is enqueued; the plans are what is checked)."""
    app = create_app(Settings(database_url=database_url, redis_url=redis_url, auth="keys",
                              data_dir=tmp_path, **limits))
    with transaction(app.state.sessions) as session:
        keys = create_key(session, "lab"), create_key(session, "other")
    client = TestClient(app)
    try:
        yield client, *({"Authorization": f"Bearer {key}"} for key in keys)
    finally:
        client.close()
        app.state.sessions.kw["bind"].dispose()
        if app.state.dispatcher is not None:
            app.state.dispatcher.redis.close()


def _study(client: TestClient, headers: dict, name: str) -> int:
    made = client.post("/v1/studies", json=BODY | {"name": name}, headers=headers)
    assert made.status_code == 201, made.text
    return made.json()["id"]


def test_an_owner_holds_at_most_owner_max_studies(database_url, tmp_path):
    with _app(database_url, tmp_path, owner_max_studies=2) as (client, lab, other):
        first, _ = _study(client, lab, "a"), _study(client, lab, "b")
        refused = client.post("/v1/studies", json=BODY | {"name": "c"}, headers=lab)
        assert refused.status_code == 409, refused.text
        assert "holds 2 studies" in refused.json()["detail"]
        assert "BBKB_OWNER_MAX_STUDIES (2)" in refused.json()["detail"]
        _study(client, other, "c")  # another owner's count is its own
        assert client.delete(f"/v1/studies/{first}", headers=lab).status_code == 204
        _study(client, lab, "c")  # a deleted study frees its place


def test_running_dispatches_share_owner_max_parallelism(database_url, tmp_path, redis_url):
    with _app(database_url, tmp_path, redis_url, owner_max_parallelism=10) as (client, lab,
                                                                                other):
        a, b, c = (_study(client, lab, name) for name in "abc")

        def dispatch(sid: int, parallelism: int, headers: dict = lab):  # type: ignore[no-untyped-def]
            return client.post(f"/v1/studies/{sid}/dispatch", headers=headers,
                               json={"n_evaluations": 50, "parallelism": parallelism})

        assert dispatch(a, 6).status_code == 200
        me = client.get("/v1/me", headers=lab).json()  # what the owner sees of its quota
        assert (me["parallelism"], me["max_parallelism"], me["studies"]) == (6, 10, 3)
        refused = dispatch(b, 5)
        assert refused.status_code == 409 and refused.json()["field"] == "parallelism"
        assert f"in studies {a}) use 6 of the 10" in refused.json()["detail"]
        assert "parallelism <= 4" in refused.json()["detail"]
        assert dispatch(b, 4).status_code == 200
        assert dispatch(a, 6).status_code == 200  # a top-up replaces its own plan's share
        assert dispatch(a, 7).status_code == 409
        full = dispatch(c, 1)
        assert full.status_code == 409 and "pause one first" in full.json()["detail"]
        assert dispatch(_study(client, other, "x"), 10, other).status_code == 200  # its own

        assert client.post(f"/v1/studies/{a}/dispatch/pause", headers=lab).status_code == 200
        assert dispatch(c, 6).status_code == 200  # a paused dispatch asks for nothing
        resumed = client.post(f"/v1/studies/{a}/dispatch/resume", headers=lab)
        assert resumed.status_code == 409 and "use 10 of the 10" in resumed.json()["detail"]
        assert client.get(f"/v1/studies/{a}/dispatch", headers=lab).json()["status"] == "paused"
        assert client.post(f"/v1/studies/{c}/dispatch", headers=lab, json={
            "n_evaluations": 50, "parallelism": 4}).status_code == 200  # c: 6 -> 4
        resumed = client.post(f"/v1/studies/{a}/dispatch/resume", headers=lab)
        assert resumed.status_code == 409  # 4 + 4 + 6 > 10; resume asks for no parallelism:
        assert "start a new dispatch with parallelism <= 2" in resumed.json()["detail"]
        assert client.delete(f"/v1/studies/{c}", headers=lab).status_code == 204
        resumed = client.post(f"/v1/studies/{a}/dispatch/resume", headers=lab)
        assert resumed.status_code == 200 and resumed.json()["status"] == "running"


def test_two_dispatches_of_one_owner_at_once_cannot_both_pass(database_url, tmp_path,
                                                              redis_url, monkeypatch):
    """Each request waits (up to 2 s) after its check for the other to pass its own: without
    the owner's lock both read the same running total and both pass (6 + 6 > 10); with it the
    second reads only once the first has committed."""
    checked, passed = threading.Barrier(2, timeout=2), quotas.check_parallelism

    def check_then_wait(*args, **kwargs):  # type: ignore[no-untyped-def]
        passed(*args, **kwargs)
        try:
            checked.wait()
        except threading.BrokenBarrierError:
            pass

    monkeypatch.setattr(quotas, "check_parallelism", check_then_wait)
    with _app(database_url, tmp_path, redis_url, owner_max_parallelism=10) as (client, lab, _):
        studies = [_study(client, lab, name) for name in "ab"]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda sid: TestClient(client.app).post(
                f"/v1/studies/{sid}/dispatch", headers=lab,
                json={"n_evaluations": 50, "parallelism": 6}).status_code, studies))
    assert sorted(answers) == [200, 409]


@pytest.mark.parametrize("value", ["", "0", "-1", "many"])
def test_limits_are_positive_integers_and_empty_is_unset(value, tmp_path, monkeypatch):
    monkeypatch.setenv("BBKB_OWNER_MAX_PARALLELISM", value)
    if value == "":
        assert Settings(data_dir=tmp_path).owner_max_parallelism is None
    else:
        with pytest.raises(ValueError, match="owner_max_parallelism"):
            Settings(data_dir=tmp_path)


def test_under_a_parallelism_quota_a_sync_dispatch_holds_to_its_parallelism(database_url,
                                                                              tmp_path,
                                                                              redis_url):
    """A sync dispatch hands out whole batches (up to 10^4 jobs) whatever its parallelism,
    which the quota counts: with BBKB_OWNER_MAX_PARALLELISM set it holds to its parallelism,
    its batch handed out as slots free up; without, it hands out whole batches as before."""
    sync = BODY | {"engine": {"strategy": "bbkb", "mode": "sync", "seed": 0},
                   "candidates": np.random.default_rng(1).random((300, 2)).tolist()}

    def first_rounds(**limits: int) -> list[int]:
        with _app(database_url, tmp_path, redis_url, **limits) as (client, lab, _):
            dispatcher = client.app.state.dispatcher
            dispatcher.queue.connection.flushall()
            made = client.post("/v1/studies", json=sync | {"name": f"s{len(limits)}"},
                               headers=lab)
            sid = made.json()["id"]
            started = client.post(f"/v1/studies/{sid}/dispatch", headers=lab,
                                  json={"n_evaluations": 200, "parallelism": 2})
            assert started.status_code == 200, started.text
            enqueued = []
            for _ in range(8):  # each round: top up, then evaluate what was handed out
                enqueued.append(dispatcher.top_up(sid))
                for job in [job.args[0] for job in dispatcher.queue.jobs]:
                    done = client.post(f"/v1/studies/{sid}/dispatch/complete", headers=lab,
                                       json={"trial_id": job["trial_id"], "value": 1.0,
                                             "worker_id": job["worker_id"]})
                    assert done.status_code == 200, done.text
                dispatcher.queue.empty()
            return enqueued

    bounded = first_rounds(owner_max_parallelism=10)
    # at most two at a time, and never stalled (the first batch holds one trial)
    assert max(bounded) <= 2 and min(bounded) >= 1 and sum(bounded) >= 12, bounded
    assert max(first_rounds()) > 2  # unbounded: a whole batch at once
