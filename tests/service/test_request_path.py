"""The ask/tell request path's bookkeeping: the study version, batch progress, requeued trials.

These are written with prebuilt Core statements (service.store.queries); the tests pin what they
record, on both databases.
"""

from __future__ import annotations

from sqlalchemy import select

from service.store.database import transaction
from service.store.models import Batch, Study

from .helpers import app_client, create_study, objective


def _study_row(client, sid: int) -> Study:  # type: ignore[no-untyped-def]
    with transaction(client.app.state.sessions) as session:
        return session.get(Study, sid)


def test_each_change_bumps_the_version_once_and_the_cached_engine_follows(database_url,
                                                                          tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 1})["id"]
        before = _study_row(client, sid)
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w", "count": 1}).json()["trials"]
        runtime = client.app.state.runtimes._cache[sid]
        asked = _study_row(client, sid)
        assert asked.version == before.version + 1 == runtime.version
        assert asked.updated_at > before.updated_at and asked.updated_at.tzinfo is not None
        client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                    json={"value": objective(list(trial["parameters"].values()))})
        told = _study_row(client, sid)
        assert told.version == asked.version + 1 == runtime.version
        assert told.updated_at >= asked.updated_at
        # the cached engine was current: the next ask reuses it rather than rebuilding
        client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 1})
        assert client.app.state.runtimes._cache[sid] is runtime


def test_batch_progress_sizes_and_closing_time_are_recorded(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client)["id"]  # sync mode: batches close and wait for results
        for _ in range(30):
            answer = client.post(f"/v1/studies/{sid}/suggestions",
                                 json={"worker_id": "w", "count": 1}).json()
            for trial in answer["trials"]:
                client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                            json={"value": objective(list(trial["parameters"].values()))})
        trials = client.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["trials"]
        batches = client.get(f"/v1/studies/{sid}/batches").json()["batches"]
        assert len(batches) >= 3
        for b in batches:
            assert b["size"] == sum(t["batch"] == b["index"] for t in trials)
        for b in batches[:-1]:
            assert b["stop_reason"] and b["closed_at"] is not None
            assert b["opened_at"] <= b["closed_at"]
        with transaction(client.app.state.sessions) as session:
            closed = {b.index: b.closed_at for b in session.scalars(
                select(Batch).where(Batch.study_id == sid))}
        # a closing time is written once: later asks leave it alone
        client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 1})
        with transaction(client.app.state.sessions) as session:
            for b in session.scalars(select(Batch).where(Batch.study_id == sid)):
                if closed.get(b.index) is not None:
                    assert b.closed_at == closed[b.index]


def test_a_worker_gets_its_running_trials_then_requeued_ones(database_url, tmp_path):
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, engine={"strategy": "bbkb", "mode": "async", "seed": 2})["id"]
        ask = lambda worker, n: client.post(  # noqa: E731
            f"/v1/studies/{sid}/suggestions", json={"worker_id": worker, "count": n}
        ).json()["trials"]
        mine = ask("a", 2)
        other = ask("b", 3)
        client.post(f"/v1/studies/{sid}/trials/{other[1]['id']}/fail",
                    json={"reason": "x", "retryable": True})
        client.post(f"/v1/studies/{sid}/trials/{other[0]['id']}/fail",
                    json={"reason": "x", "retryable": True})
        again = ask("a", 4)  # its 2 running ones, then the 2 requeued ones (t order)
        assert [t["id"] for t in again] == [t["id"] for t in mine] + [other[0]["id"],
                                                                        other[1]["id"]]
        assert [t["attempt"] for t in again[2:]] == [2, 2]
        assert [t["id"] for t in ask("a", 1)] == [mine[0]["id"]]  # at most count
