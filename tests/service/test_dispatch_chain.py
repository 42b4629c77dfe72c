"""A dispatch job goes on with the next trial the server hands back with each result
(POST /v1/studies/{id}/dispatch/complete): budget, parallelism, pause, sync mode, retries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings


@pytest.fixture
def system(redis_url: str) -> Iterator[Callable[..., tuple[Any, TestClient, int]]]:
    """Builds (app, client, study id) with a dispatch of ``n`` evaluations; closes the client,
    the engine's pooled connections and the dispatcher's Redis connection afterwards (what the
    lifespan's end would do)."""
    apps: list[tuple[Any, TestClient]] = []

    def build(tmp_path: Path, mode: str = "async", n: int = 5) -> tuple[Any, TestClient, int]:
        app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'chain.db'}",
                                  redis_url=redis_url, auth="none", data_dir=tmp_path))
        client = TestClient(app)  # no `with`: the dispatcher thread stays off, the test drives it
        apps.append((app, client))
        app.state.dispatcher.queue.connection.flushall()
        body = {"name": "chain", "candidates": np.random.default_rng(0).random((60, 2)).tolist(),
                "objective": "function:branin", "engine": {"strategy": "bbkb", "seed": 0,
                                                            "mode": mode}}
        sid = client.post("/v1/studies", json=body).json()["id"]
        r = client.post(f"/v1/studies/{sid}/dispatch",
                        json={"n_evaluations": n, "parallelism": 2})
        assert r.status_code == 200, r.text
        return app, client, sid

    yield build
    for app, client in apps:
        client.close()
        app.state.sessions.kw["bind"].dispose()
        app.state.dispatcher.redis.close()


def _complete(client, sid: int, job: dict, value: float, **extra):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/studies/{sid}/dispatch/complete", json={
        "trial_id": job["trial_id"], "value": value, "worker_id": job["worker_id"]} | extra)


def test_each_result_brings_the_next_trial_until_the_budget_is_spent(tmp_path, system):
    app, client, sid = system(tmp_path)
    assert app.state.dispatcher.top_up(sid) == 2
    queue = app.state.dispatcher.queue
    jobs = [job.args[0] for job in queue.jobs]
    assert len(jobs) == 2 and jobs[0]["worker_id"] != jobs[1]["worker_id"]

    first = _complete(client, sid, jobs[0], 1.0)
    assert first.status_code == 200, first.text
    chained = first.json()["next"]
    assert chained["worker_id"] == jobs[0]["worker_id"]  # the same job carries it on
    assert chained["trial_id"] not in {j["trial_id"] for j in jobs}
    assert chained["job_id"] == jobs[0]["job_id"] and chained["objective"] == "function:branin"
    again = _complete(client, sid, jobs[0], 1.0)  # a retried request: no-op, the same trial
    assert again.status_code == 200 and again.json()["next"] == chained
    assert _complete(client, sid, jobs[0], 2.0).status_code == 409
    for trial_id in (2**63, 2**62 + 1):  # beyond SQL's BIGINT: a 500 before
        beyond = _complete(client, sid, {**jobs[0], "trial_id": trial_id}, 1.0)
        assert beyond.status_code == 422 and beyond.json()["field"] == "trial_id", beyond.text

    status = client.get(f"/v1/studies/{sid}/dispatch").json()
    assert status["in_flight"] == 2 and status["finished"] == 1  # parallelism is kept
    assert status["completed"] == 1
    app.state.runtimes.forget(sid)  # a process without the engine counts in the database
    assert client.get(f"/v1/studies/{sid}/dispatch").json() == status

    live, evaluated = [chained, jobs[1]], 1
    while live:
        job = live.pop(0)
        answer = _complete(client, sid, job, float(evaluated)).json()
        evaluated += 1
        if answer["next"] is not None:
            live.append(answer["next"])
    assert evaluated == 5  # exactly the budget: no trial beyond n_evaluations was handed out
    assert queue.count == 2  # and no new job was needed for any of them
    app.state.dispatcher.top_up(sid)
    status = client.get(f"/v1/studies/{sid}/dispatch").json()
    assert (status["status"], status["finished"], status["in_flight"]) == ("done", 5, 0)
    assert status["completed"] == 5
    app.state.runtimes.forget(sid)
    assert client.get(f"/v1/studies/{sid}/dispatch").json() == status

    # a second dispatch counts from its start (it used to be done at once: 5 >= 3)
    again = client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 3,
                                                              "parallelism": 2}).json()
    assert (again["status"], again["n_evaluations"], again["finished"]) == ("running", 3, 0)
    assert again["completed"] == 0
    assert app.state.dispatcher.top_up(sid) == 2
    live = [job.args[0] for job in queue.jobs][-2:]
    while live:
        answer = _complete(client, sid, live.pop(0), 0.5).json()
        evaluated += 1
        if answer["next"] is not None:
            live.append(answer["next"])
    assert evaluated == 8
    app.state.dispatcher.top_up(sid)
    status = client.get(f"/v1/studies/{sid}/dispatch").json()
    assert (status["status"], status["finished"], status["in_flight"]) == ("done", 3, 0)
    assert status["completed"] == 3
    app.state.runtimes.forget(sid)
    assert client.get(f"/v1/studies/{sid}/dispatch").json() == status


def test_no_next_trial_when_paused_asked_not_to_or_in_sync_mode(tmp_path, system):
    app, client, sid = system(tmp_path, n=50)
    app.state.dispatcher.top_up(sid)
    jobs = [job.args[0] for job in app.state.dispatcher.queue.jobs]
    assert _complete(client, sid, jobs[0], 1.0, next=False).json()["next"] is None
    client.post(f"/v1/studies/{sid}/dispatch/pause")
    assert _complete(client, sid, jobs[1], 1.0).json()["next"] is None
    other = client.post("/v1/studies", json={"name": "none", "candidates": [[0.0], [1.0]]})
    for action, verb in (("pause", "pause"), ("resume", "resume")):
        refused = client.post(f"/v1/studies/{other.json()['id']}/dispatch/{action}")
        assert refused.status_code == 409
        assert refused.json()["detail"].endswith(f"has no dispatch to {verb}")
    bad = _complete(client, sid, jobs[1] | {"worker_id": "someone"}, 1.0)
    assert bad.status_code == 422 and bad.json()["field"] == "worker_id"

    app, client, sid = system(tmp_path / "sync", mode="sync", n=50)
    app.state.dispatcher.top_up(sid)
    job = app.state.dispatcher.queue.jobs[0].args[0]
    assert _complete(client, sid, job, 1.0).json()["next"] is None  # sync: whole batches


def test_a_pause_between_the_unlocked_check_and_the_top_up_enqueues_nothing(tmp_path, system,
                                                                           monkeypatch):
    """``_due`` reads the dispatch without the study's lock; a pause that lands after it must
    still stop the top-up, which runs under the lock (it enqueued a paused study's trials)."""
    app, client, sid = system(tmp_path, n=50)
    dispatcher = app.state.dispatcher
    due = dispatcher._due

    def due_then_paused(study_id: int) -> bool:
        answer = due(study_id)
        assert client.post(f"/v1/studies/{study_id}/dispatch/pause").status_code == 200
        return answer

    monkeypatch.setattr(dispatcher, "_due", due_then_paused)
    assert dispatcher.top_up(sid) == 0
    assert dispatcher.queue.count == 0
    status = client.get(f"/v1/studies/{sid}/dispatch").json()
    assert (status["status"], status["in_flight"]) == ("paused", 0)


def test_pause_for_an_objective_leaves_a_dispatch_of_another_running(tmp_path, system):
    """``?objective=`` pauses only a dispatch of that objective, in one step: a worker that
    cannot run an old dispatch's objective never pauses the newer dispatch of another."""
    app, client, sid = system(tmp_path, n=50)
    other = client.post(f"/v1/studies/{sid}/dispatch/pause",
                        params={"objective": "function:levy"})
    assert other.status_code == 409 and other.json()["field"] == "objective"
    assert "runs 'function:branin', not 'function:levy'" in other.json()["detail"]
    assert client.get(f"/v1/studies/{sid}/dispatch").json()["status"] == "running"
    same = client.post(f"/v1/studies/{sid}/dispatch/pause",
                       params={"objective": "function:branin"})
    assert same.status_code == 200 and same.json()["status"] == "paused"


def test_queued_trials_have_no_lease_and_go_back_when_the_dispatch_stops(tmp_path, system):
    """A trial whose job waits in the queue has no lease (it cannot expire there); once the
    dispatch is paused, the reaper releases such trials to the pool with the attempt not
    counted: nothing waits for jobs that may never run (Redis emptied or removed meanwhile).
    A worker taking a stale job then finds its trial gone (409) and skips it."""
    from service.api.app import reap_expired_leases

    app, client, sid = system(tmp_path, n=4)
    assert app.state.dispatcher.top_up(sid) == 2
    queued = client.get(f"/v1/studies/{sid}/trials", params={"status": "running"}).json()
    assert queued["trials"] and all(t["lease_expires_at"] is None for t in queued["trials"])
    assert reap_expired_leases(app) == 0  # nothing to reap, nothing released: still dispatching
    assert client.get(f"/v1/studies/{sid}/trials", params={"status": "running"}).json() == queued

    assert client.post(f"/v1/studies/{sid}/dispatch/pause").status_code == 200
    app.state.dispatcher.queue.connection.flushall()  # e.g. Redis restarted meanwhile
    reap_expired_leases(app)
    trials = client.get(f"/v1/studies/{sid}/trials").json()["trials"]
    assert [(t["status"], t["attempt"]) for t in trials] == [("pending", 0)] * len(trials)
    stale = queued["trials"][0]
    r = client.post(f"/v1/studies/{sid}/trials/{stale['id']}/heartbeat",
                    json={"worker_id": stale["worker_id"]})
    assert r.status_code == 409  # a stale job's worker skips the trial
    asked = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "me", "count": 2})
    assert sorted(t["id"] for t in asked.json()["trials"]) == sorted(t["id"] for t in trials)
    assert {t["attempt"] for t in asked.json()["trials"]} == {1}  # no attempt was used up


def test_a_released_trial_keeps_its_attempts(tmp_path, system):
    """fail with release (a worker that cannot run the objective): back to the pool, the
    attempt not counted, the reason kept; with max_attempts 3 a release never fails it."""
    app, client, sid = system(tmp_path)
    assert app.state.dispatcher.top_up(sid) == 2
    job = app.state.dispatcher.queue.jobs[0].args[0]
    for _ in range(5):
        assert client.post(f"/v1/studies/{sid}/trials/{job['trial_id']}/heartbeat",
                           json={"worker_id": job["worker_id"]}).status_code == 200
        r = client.post(f"/v1/studies/{sid}/trials/{job['trial_id']}/fail", json={
            "reason": "refused here", "worker_id": job["worker_id"], "release": True})
        assert r.status_code == 200 and (r.json()["status"], r.json()["attempt"]) == (
            "pending", 0), r.text
        assert r.json()["error"] == "refused here"
        asked = client.post(f"/v1/studies/{sid}/suggestions",
                            json={"worker_id": job["worker_id"], "count": 1}).json()["trials"]
        assert [(t["id"], t["attempt"]) for t in asked] == [(job["trial_id"], 1)]


def test_a_done_dispatch_cannot_be_paused_or_resumed(tmp_path, system):
    """Pausing a finished dispatch showed it as paused (and a resume ran it again on no
    budget): both are a 409 that says to start a new one, and it stays done."""
    app, client, sid = system(tmp_path, n=2)
    assert app.state.dispatcher.top_up(sid) == 2
    for job in [job.args[0] for job in app.state.dispatcher.queue.jobs]:
        assert _complete(client, sid, job, 1.0, next=False).status_code == 200
    assert app.state.dispatcher.top_up(sid) == 0
    assert client.get(f"/v1/studies/{sid}/dispatch").json()["status"] == "done"
    for verb in ("pause", "resume"):
        r = client.post(f"/v1/studies/{sid}/dispatch/{verb}")
        assert r.status_code == 409 and r.json()["field"] == "study_id", r.text
        assert f"is done: nothing to {verb}" in r.json()["detail"]
    assert client.get(f"/v1/studies/{sid}/dispatch").json()["status"] == "done"
    r = client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 1})
    assert r.status_code == 200 and r.json()["status"] == "running"


def test_a_dispatch_of_another_objective_releases_the_old_dispatchs_queued_trials(tmp_path,
                                                                                  system):
    """Jobs still queued under a dispatch of one objective ran it after a dispatch of another
    had replaced it. The new dispatch gives their trials back: the worker that takes an old
    job skips it (409 on its first heartbeat), and the trials go out under the new
    objective. With the same objective, the queued jobs are kept."""
    app, client, sid = system(tmp_path, n=10)
    queue = app.state.dispatcher.queue
    assert app.state.dispatcher.top_up(sid) == 2
    old = [job.args[0] for job in queue.jobs]
    r = client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 10, "parallelism": 2})
    assert r.status_code == 200  # the same objective: the queued trials stay queued
    running = client.get(f"/v1/studies/{sid}/trials", params={"status": "running"}).json()
    assert sorted(t["id"] for t in running["trials"]) == sorted(job["trial_id"] for job in old)

    r = client.post(f"/v1/studies/{sid}/dispatch", json={
        "n_evaluations": 10, "parallelism": 2, "objective": "function:levy"})
    assert r.status_code == 200, r.text
    for job in old:
        trial = client.get(f"/v1/studies/{sid}/trials/{job['trial_id']}").json()
        assert (trial["status"], trial["attempt"]) == ("pending", 0)
        beat = client.post(f"/v1/studies/{sid}/trials/{job['trial_id']}/heartbeat",
                           json={"worker_id": job["worker_id"]})
        assert beat.status_code == 409  # the old job's worker skips it
    queue.empty()
    assert app.state.dispatcher.top_up(sid) == 2
    new = [job.args[0] for job in queue.jobs]
    assert {job["objective"] for job in new} == {"function:levy"}
    assert sorted(job["trial_id"] for job in new) == sorted(job["trial_id"] for job in old)


def test_an_idle_sync_dispatch_pass_leaves_the_study_as_it_is(tmp_path, system):
    """A sync dispatch asked the engine at every pass (each 0.5 s) while its batch ran, only to
    learn it was waiting, and each ask bumped the study's version, which makes every other
    server process reload the study. With the batch out and nothing given back, a pass is idle;
    a trial given back, or the batch's end, makes it due again."""
    from service.store.database import transaction
    from service.store.models import Study

    app, client, sid = system(tmp_path, mode="sync", n=50)

    def version() -> int:
        with transaction(app.state.read_sessions) as session:
            return session.get(Study, sid).version

    dispatcher = app.state.dispatcher
    handed = dispatcher.top_up(sid)
    assert handed >= 1
    jobs = [job.args[0] for job in dispatcher.queue.jobs]
    before = version()
    assert [dispatcher.top_up(sid) for _ in range(3)] == [0, 0, 0] and version() == before
    first, *rest = jobs
    beat = client.post(f"/v1/studies/{sid}/trials/{first['trial_id']}/heartbeat",
                       json={"worker_id": first["worker_id"]})
    assert beat.status_code == 200
    r = client.post(f"/v1/studies/{sid}/trials/{first['trial_id']}/fail",
                    json={"reason": "node lost", "retryable": True,
                          "worker_id": first["worker_id"]})
    assert r.status_code == 200 and r.json()["status"] == "pending", r.text
    assert dispatcher.top_up(sid) == 1  # the trial given back goes out again
    for job in [job.args[0] for job in dispatcher.queue.jobs][handed:] + rest:
        assert _complete(client, sid, job, 1.0, next=False).status_code == 200
    assert dispatcher.top_up(sid) >= 1  # the batch is done: the next one goes out


def test_a_sync_dispatch_hands_out_the_rest_of_a_batch_a_smaller_one_left(tmp_path, system):
    """A dispatch whose budget ran out mid-batch left the batch open: a new dispatch hands out
    its rest at once, while the first trials still run (not after they end)."""
    app, client, _ = system(tmp_path)
    body = {"name": "eights", "candidates": np.random.default_rng(1).random((60, 2)).tolist(),
            "objective": "function:branin",
            "engine": {"strategy": "uniform", "mode": "sync", "batch_size": 8, "seed": 0}}
    sid = client.post("/v1/studies", json=body).json()["id"]
    client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 3})
    dispatcher = app.state.dispatcher
    assert dispatcher.top_up(sid) == 3
    batch = client.get(f"/v1/studies/{sid}/batches").json()["batches"][-1]
    assert batch["closed_at"] is None  # the budget stopped the hand-out, not the rule
    client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 100})
    assert dispatcher.top_up(sid) == 5  # the rest of the open batch
    assert client.get(f"/v1/studies/{sid}/batches").json()["batches"][-1]["closed_at"]
    assert dispatcher.top_up(sid) == 0  # now it waits for the batch


def test_batches_a_dispatch_opens_are_counted_in_the_metrics(tmp_path, system):
    """/metrics counted (and timed) only the batches a worker's suggestions request opened:
    a dispatched study, whose batches the dispatcher and the jobs' next trials open, showed
    none."""
    app, client, sid = system(tmp_path, n=12)
    assert app.state.dispatcher.top_up(sid) == 2
    jobs = [job.args[0] for job in app.state.dispatcher.queue.jobs]
    for step in range(10):  # each result brings the next trial, until the budget is spent
        r = _complete(client, sid, jobs[step % 2], float(step))
        assert r.status_code == 200, r.text
        jobs[step % 2] = r.json()["next"] or jobs[step % 2]
    batches = client.get(f"/v1/studies/{sid}/batches").json()["batches"]
    assert len(batches) > 2
    text = client.get("/metrics").text
    assert f"bbkb_batches_total {len(batches):.1f}" in text
    assert f"bbkb_batch_open_seconds_count {len(batches):.1f}" in text
