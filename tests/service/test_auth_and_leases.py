"""API keys isolate owners; leases expire, are re-issued, and end in abandonment; late results."""

from __future__ import annotations

import sqlite3
import time
from datetime import timedelta

from service.api.app import reap_expired_leases
from service.auth import create_key
from service.store.database import transaction
from service.store.models import Study

from .helpers import app_client, create_study


def _keys(client) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    with transaction(client.app.state.sessions) as session:
        alice, bob = create_key(session, "alice"), create_key(session, "bob")
    return ({"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"})


def test_the_scheme_is_case_insensitive_and_a_wrong_one_is_named(database_url, tmp_path):
    """Before, 'bearer <key>' (RFC 7235: schemes are case-insensitive) was refused, and any
    other scheme was reported as a missing header."""
    with app_client(database_url, tmp_path, auth="keys") as client:
        alice = _keys(client)[0]["Authorization"].removeprefix("Bearer ")
        for header in (f"bearer {alice}", f"BEARER  {alice} ", f"  Bearer {alice}",
                       f"Bearer\t{alice}"):
            r = client.get("/v1/studies", headers={"Authorization": header})
            assert r.status_code == 200, (header, r.text)
        for header, why in (("Basic YWxpY2U6eA==", "scheme 'Basic'"),
                            (alice, "no scheme"), ("", "missing"),
                            (f"{alice} x", "no scheme"),  # the key is not echoed as a scheme
                            ("Bearer", "no key after 'Bearer'")):
            r = client.get("/v1/studies", headers={"Authorization": header})
            assert r.status_code == 401 and r.json()["field"] == "authorization", r.text
            assert why in r.json()["detail"] and alice not in r.json()["detail"], r.text


def test_a_key_never_sees_another_owners_study(database_url, tmp_path):
    with app_client(database_url, tmp_path, auth="keys") as client:
        assert client.get("/v1/studies").status_code == 401
        assert client.get("/v1/studies",
                          headers={"Authorization": "Bearer nope"}).status_code == 401
        alice, bob = _keys(client)
        client.headers.update(alice)
        sid = create_study(client, name="mine")["id"]
        client.headers.update(bob)
        assert client.get(f"/v1/studies/{sid}").status_code == 404  # 404, not 403
        assert client.get("/v1/studies").json()["studies"] == []
        r = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "x"})
        assert r.status_code == 404
        assert client.get(f"/v1/studies/{sid}/export").status_code == 404
        create_study(client, name="mine")  # names are unique per owner only
        client.headers.update(alice)
        assert [s["name"] for s in client.get("/v1/studies").json()["studies"]] == ["mine"]


def test_expired_leases_are_reissued_then_abandoned(database_url, tmp_path):
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid = create_study(client, lease_seconds=0.2, max_attempts=2)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "dead", "count": 1}).json()["trials"]
        _wait_status(client, sid, trial["id"], "pending")
        (again,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "alive", "count": 1}).json()["trials"]
        assert again["id"] == trial["id"] and again["attempt"] == 2
        assert "lease expired" in again["error"]
        final = _wait_status(client, sid, trial["id"], "abandoned")
        assert final["attempt"] == 2
        (new,) = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "alive", "count": 1}).json()["trials"]
        assert new["t"] == 1  # the sync batch was released by the abandonment


def test_heartbeat_keeps_a_lease_alive(database_url, tmp_path):
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid = create_study(client, lease_seconds=2.0)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w", "count": 1}).json()["trials"]
        url = f"/v1/studies/{sid}/trials/{trial['id']}"
        expiry = trial["lease_expires_at"]
        for _ in range(7):  # 3.5 s in all: longer than one lease, 1.5 s margin per beat
            time.sleep(0.5)
            beat = client.post(f"{url}/heartbeat", json={"worker_id": "w"})
            assert beat.status_code == 200
            assert beat.json()["lease_expires_at"] > expiry
            expiry = beat.json()["lease_expires_at"]
        assert client.get(url).json()["status"] == "running"
        wrong = client.post(f"{url}/heartbeat", json={"worker_id": "other"})
        assert wrong.status_code == 409 and wrong.json()["field"] == "worker_id"
        bare = client.post(f"{url}/heartbeat")  # no body: any worker may extend it
        assert bare.status_code == 200 and bare.json()["lease_expires_at"] > expiry


def _late_study(client, max_attempts: int) -> tuple[int, object]:  # type: ignore[no-untyped-def]
    """An async study with short leases, and ``ask(worker)`` giving that worker one trial."""
    sid = client.post("/v1/studies", json={
        "name": f"late-{max_attempts}", "candidates": [[0.0], [0.5], [1.0]], "lease_seconds": 0.2,
        "max_attempts": max_attempts,
        "engine": {"strategy": "uniform", "batch_size": 3, "mode": "async"}}).json()["id"]

    def ask(worker: str) -> dict:
        return client.post(f"/v1/studies/{sid}/suggestions",
                           json={"worker_id": worker}).json()["trials"][0]
    return sid, ask


def _complete(client, sid: int, trial_id: int, value: float, worker: str):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/studies/{sid}/trials/{trial_id}/complete",
                       json={"value": value, "worker_id": worker})


def test_a_late_result_for_a_trial_back_in_the_pool_is_accepted(database_url, tmp_path):
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid, ask = _late_study(client, max_attempts=3)
        trial = ask("slow")
        _wait_status(client, sid, trial["id"], "pending")
        late = _complete(client, sid, trial["id"], 1.5, "slow")
        assert late.status_code == 200
        assert (late.json()["status"], late.json()["value"]) == ("completed", 1.5)
        assert ask("next")["t"] == 1  # the completed trial is no longer handed out
        assert client.get(f"/v1/studies/{sid}/best").json()["id"] == trial["id"]


def test_a_late_result_wins_over_the_attempt_it_was_reissued_to(database_url, tmp_path):
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid, ask = _late_study(client, max_attempts=3)
        trial = ask("slow")
        _wait_status(client, sid, trial["id"], "pending")
        again = ask("fast")
        assert (again["id"], again["attempt"]) == (trial["id"], 2)
        late = _complete(client, sid, trial["id"], 2.0, "slow")
        assert (late.status_code, late.json()["status"]) == (200, "completed")
        same = _complete(client, sid, trial["id"], 2.0, "fast")  # the same value: a no-op
        assert (same.status_code, same.json()["value"]) == (200, 2.0)
        other = _complete(client, sid, trial["id"], 3.0, "fast")
        assert (other.status_code, other.json()["field"]) == (409, "value")
        beat = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/heartbeat",
                           json={"worker_id": "fast"})
        assert beat.status_code == 409  # the second attempt learns its work is moot
        assert client.get(f"/v1/studies/{sid}").json()["counts"]["completed"] == 1


def test_a_late_result_for_an_abandoned_trial_enters_as_an_observation(database_url, tmp_path):
    """After the last attempt's lease expired the engine was told the candidate was abandoned;
    a late result is not lost: it enters as an imported observation of that candidate (a new
    trial), the abandoned trial keeps the value, repeating it is a no-op and another value a
    409; the study rebuilt from the database proposes what the live engine does."""
    with app_client(database_url, tmp_path, reaper_interval=0.05) as client:
        sid, ask = _late_study(client, max_attempts=1)
        trial = ask("slow")
        _wait_status(client, sid, trial["id"], "abandoned")
        late = _complete(client, sid, trial["id"], 4.0, "slow")
        assert late.status_code == 200
        assert (late.json()["status"], late.json()["value"]) == ("abandoned", 4.0)
        assert _complete(client, sid, trial["id"], 4.0, "slow").status_code == 200
        other = _complete(client, sid, trial["id"], 5.0, "slow")
        assert (other.status_code, other.json()["field"]) == (409, "value")
        imported = client.get(f"/v1/studies/{sid}/trials", params={"kind": "imported"}).json()
        ((row,),) = (imported["trials"],)
        assert (row["candidate"], row["value"], row["status"]) == (
            trial["candidate"], 4.0, "completed")
        assert client.get(f"/v1/studies/{sid}/best").json()["value"] == 4.0
        assert client.get(f"/v1/studies/{sid}").json()["counts"]["completed"] == 1
        with transaction(client.app.state.sessions) as session:  # as after a restart
            rebuilt = client.app.state.runtimes.load(session, session.get(Study, sid)).strategy
        expected = [(s.t, s.arm) for s in (rebuilt.ask(1)[0] for _ in range(2))]
        assert [(t["t"], t["candidate"]) for t in (ask(f"w{i}") for i in range(2))] == expected


def _wait_status(client, sid: int, trial_id: int, status: str) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        trial = client.get(f"/v1/studies/{sid}/trials/{trial_id}").json()
        if trial["status"] == status:
            return trial
        time.sleep(0.05)
    raise AssertionError(f"trial {trial_id} never became {status}: {trial}")


def test_a_server_hears_out_a_lease_before_reaping_it(database_url, tmp_path):
    """A server down for longer than a lease: its first reaper pass took every trial still
    being evaluated (the workers' heartbeats had found no server) and handed it out again. A
    process reaps a study's leases only once it has run for one lease: a worker that
    heartbeats keeps its trial, one that does not loses it then. A process that ran all along
    reaps as before, whatever other processes start meanwhile."""
    with app_client(database_url, tmp_path, reaper_interval=3600) as client:
        sid = create_study(client, lease_seconds=1.0, engine={
            "strategy": "uniform", "mode": "async", "batch_size": 4, "seed": 0})["id"]
        trials = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 2}).json()["trials"]
        assert len(trials) == 2
    time.sleep(1.2)  # the server is down for longer than the lease
    with app_client(database_url, tmp_path, reaper_interval=3600) as client:
        assert reap_expired_leases(client.app) == 0  # up for less than a lease
        alive, dead = (f"/v1/studies/{sid}/trials/{t['id']}" for t in trials)
        for _ in range(3):  # 1.2 s: the live worker's heartbeats reach the server again
            time.sleep(0.4)
            assert client.post(f"{alive}/heartbeat", json={"worker_id": "w"}).status_code == 200
        assert reap_expired_leases(client.app) == 1
        assert client.get(alive).json()["status"] == "running"
        assert client.get(dead).json()["status"] == "pending"

        (again,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w2", "count": 1}).json()["trials"]
        time.sleep(1.2)  # w2 dies; another process starts meanwhile
        with app_client(database_url, tmp_path, reaper_interval=3600):
            pass
        assert reap_expired_leases(client.app) >= 1
        assert client.get(f"/v1/studies/{sid}/trials/{again['id']}").json()["status"] == "pending"


def test_a_server_hears_out_a_lease_after_its_database_comes_back(tmp_path, caplog):
    """The database down (here: SQLite's write lock held) for longer than a lease while the
    server runs: the workers' heartbeats found no database, and the first pass after it came
    back took every trial still being evaluated. Now the reaper hears the workers out for a
    lease after the outage, as after a start, and says so in one line, not a traceback a pass."""
    database = tmp_path / "db.sqlite"
    with app_client(f"sqlite:///{database}", tmp_path, reaper_interval=0.1,
                    database_busy_seconds=0.2) as client:
        sid = create_study(client, lease_seconds=2.0, engine={
            "strategy": "uniform", "mode": "async", "batch_size": 4, "seed": 0})["id"]
        trials = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "w", "count": 2}).json()["trials"]
        alive, dead = (f"/v1/studies/{sid}/trials/{t['id']}" for t in trials)
        client.app.state.heard_since -= timedelta(hours=1)  # a server up for long
        lock = sqlite3.connect(database, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # no write gets through: no heartbeat, no reaping
        time.sleep(3.0)  # longer than the lease: both leases ran out meanwhile
        lock.execute("COMMIT")
        lock.close()
        back = time.monotonic()
        while client.get(dead).json()["status"] == "running":  # reaped a lease later
            assert client.post(f"{alive}/heartbeat", json={"worker_id": "w"}).status_code == 200
            assert time.monotonic() - back < 20, "the dead worker's trial was never reaped"
            time.sleep(0.3)
        assert time.monotonic() - back >= 2.0  # not before a lease after the outage
        assert client.get(dead).json()["status"] == "pending"
        assert client.get(alive).json()["status"] == "running"  # heard: kept
        assert client.get(alive).json()["attempt"] == 1
    said = [r for r in caplog.records if r.name == "bbkb.server"]
    assert [r.getMessage().split(":")[0] for r in said if "database" in r.getMessage()] == [
        "the lease reaper finds the database unavailable",
        "the lease reaper finds the database available again"]
    assert not any(r.exc_info for r in said)


def test_one_studys_failing_statement_is_not_an_outage_for_the_others(tmp_path, caplog):
    """A statement timeout (or deadlock, or serialization failure) of one study's reap is that
    study's: the others are reaped in the same pass and the reaper says which study failed,
    with its traceback. Taken for a database outage, it stopped the reaper for every study
    after it, for good if it recurred within a lease."""
    import psycopg
    from sqlalchemy.exc import OperationalError

    from service.store.database import database_down

    def error(orig: Exception) -> OperationalError:
        return OperationalError("UPDATE trials ...", {}, orig)

    timeout = error(psycopg.errors.QueryCanceled("canceling statement due to statement timeout"))
    assert not database_down(timeout) and not database_down(error(psycopg.errors.DeadlockDetected(
        "deadlock detected")))
    assert database_down(error(psycopg.OperationalError("connection failed: refused")))
    assert database_down(error(psycopg.errors.AdminShutdown("terminating connection")))
    assert database_down(error(sqlite3.OperationalError("database is locked")))

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    with app_client(url, tmp_path, reaper_interval=3600) as client:
        engine = {"strategy": "uniform", "mode": "async", "batch_size": 4, "seed": 0}
        first, second = (create_study(client, name=n, lease_seconds=0.5, engine=engine)["id"]
                         for n in ("first", "second"))
        for sid in (first, second):
            assert client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w", "count": 1}).status_code == 200
        client.app.state.heard_since -= timedelta(hours=1)
        time.sleep(0.6)  # both workers died: both leases ran out
        runtimes = client.app.state.runtimes
        mutate = runtimes.mutate

        def failing(study_id, owner, change):  # type: ignore[no-untyped-def]
            if study_id == first:
                raise timeout
            return mutate(study_id, owner, change)

        runtimes.mutate = failing
        try:
            assert reap_expired_leases(client.app) == 1  # the second study's, in this pass
        finally:
            runtimes.mutate = mutate
        statuses = {sid: client.get(f"/v1/studies/{sid}/trials").json()["trials"][0]["status"]
                    for sid in (first, second)}
        assert statuses == {first: "running", second: "pending"}
    failed = [r for r in caplog.records if "could not reap leases of study" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info and f"study {first}" in failed[0].getMessage()
