"""Distributed evaluation end to end: real Redis, a real server, real RQ worker processes."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from service.processes import ServerProcess
from workers import runner

from ..shared_http import http
from .helpers import dispatch_study
from .objective_fns import quadratic

X = np.random.default_rng(0).random((300, 2))


def _start_workers(system: dict, n: int, **env: str) -> None:
    system["workers"] += runner.spawn(system["redis"].url, n,
                                      env={"BBKB_URL": system["server"].url, **env})


def _study(url: str, objective: str, **fields: Any) -> int:
    return dispatch_study(url, X, objective, **fields)


def _wait(url: str, sid: int, until, timeout: float, poll: float = 0.2) -> dict:  # type: ignore[no-untyped-def]
    """Poll the study's dispatch status until ``until(status)``; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = http.get(f"{url}/v1/studies/{sid}/dispatch").json()
        if until(status):
            return status
        time.sleep(poll)
    raise AssertionError(f"dispatch status never reached the condition: {status}")


def _done(status: dict) -> bool:
    return status["status"] == "done"


def _warm(status: dict) -> bool:
    return status["finished"] >= 1  # the workers have run a job


def _dispatch_and_wait(url: str, sid: int, n: int, timeout: float = 120, **plan) -> dict:  # type: ignore[no-untyped-def]
    r = http.post(f"{url}/v1/studies/{sid}/dispatch",
                   json={"n_evaluations": n, "parallelism": 4} | plan)
    assert r.status_code == 200, r.text
    return _wait(url, sid, _done, timeout)


def _trials(url: str, sid: int) -> list[dict]:
    return http.get(f"{url}/v1/studies/{sid}/trials", params={"limit": 10_000}).json()["trials"]


def test_four_workers_evaluate_a_study_end_to_end(system):
    url = system["server"].url
    _start_workers(system, 4)
    sid = _study(url, "tests.workers.objective_fns:quadratic")
    status = _dispatch_and_wait(url, sid, 40)
    trials = _trials(url, sid)
    assert status["finished"] == 40 == len(trials)
    assert all(t["status"] == "completed" for t in trials)
    for t in trials:  # every recorded value is the objective at the trial's candidate
        assert t["value"] == pytest.approx(quadratic(*X[t["candidate"]]), abs=1e-12)
    jobs = {t["worker_id"] for t in trials}  # the RQ job that carried each trial
    assert 1 < len(jobs) < 20  # several jobs, each going on with the trials handed back to it


def test_a_deterministic_study_is_dispatched_each_candidate_once_then_done(system):
    url = system["server"].url
    _start_workers(system, 2)
    engine = {"strategy": "bbkb", "mode": "async", "seed": 0, "deterministic": True}
    sid = dispatch_study(url, X[:12], "tests.workers.objective_fns:quadratic", engine=engine)
    status = _dispatch_and_wait(url, sid, 30)  # more evaluations than candidates
    trials = _trials(url, sid)
    assert status["finished"] == 12 and sorted(t["candidate"] for t in trials) == list(range(12))
    r = http.post(f"{url}/v1/studies/{sid}/suggestions", json={"worker_id": "lab"})
    assert r.status_code == 422 and r.json()["field"] == "candidates", r.text
    assert "every one of the 12 candidates" in r.json()["detail"]


def test_a_killed_worker_loses_nothing(system):
    url = system["server"].url
    _start_workers(system, 2, BBKB_TEST_DELAY="1.0")
    sid = _study(url, "tests.workers.objective_fns:slow", max_attempts=50, lease_seconds=2.0)
    # (many attempts: under CI load a live worker's heartbeat can miss a 2 s lease too)
    http.post(f"{url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 8, "parallelism": 2})
    _wait(url, sid, _warm, 60, poll=0.05)
    time.sleep(0.3)  # both workers are now inside a 1 s evaluation
    system["workers"][0].kill()
    _start_workers(system, 1, BBKB_TEST_DELAY="1.0")
    _wait(url, sid, _done, 90)
    trials = _trials(url, sid)
    assert [t["status"] for t in trials] == ["completed"] * len(trials), [
        (t["status"], t["attempt"], t["error"]) for t in trials]
    assert len(trials) == 8
    assert max(t["attempt"] for t in trials) >= 2  # the killed worker's trial was re-run


@pytest.mark.parametrize("objective, expect", [
    ("flaky", "flaky instrument"), ("nan", "not a finite number"), ("text", "not a number")])
def test_bad_objectives_fail_with_a_reason_and_the_study_carries_on(system, objective, expect):
    url = system["server"].url
    _start_workers(system, 2)
    sid = _study(url, f"tests.workers.objective_fns:{objective}", max_attempts=2)
    status = _dispatch_and_wait(url, sid, 20)
    trials = _trials(url, sid)
    failed = [t for t in trials if t["status"] == "failed"]
    assert status["finished"] == 20 and failed
    assert all(expect in t["error"] for t in failed)
    if objective != "text":
        assert any(t["status"] == "completed" for t in trials)


def test_a_hanging_objective_is_stopped_by_the_job_timeout(system):
    url = system["server"].url
    _start_workers(system, 2)
    sid = _study(url, "tests.workers.objective_fns:hang", max_attempts=1)
    status = _dispatch_and_wait(url, sid, 2, job_timeout=2, timeout=60)
    trials = _trials(url, sid)
    assert status["finished"] == 2
    assert {t["status"] for t in trials} <= {"failed", "abandoned"}


def test_redis_flushed_mid_run_is_repaired_from_the_database(system):
    from redis import Redis

    url = system["server"].url
    sid = _study(url, "tests.workers.objective_fns:quadratic")
    http.post(f"{url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 12, "parallelism": 4})
    time.sleep(1.0)  # jobs enqueued, no worker yet
    Redis.from_url(system["redis"].url).flushall()
    _start_workers(system, 2)
    _wait(url, sid, _done, 90)
    assert [t["status"] for t in _trials(url, sid)] == ["completed"] * 12


def test_the_server_restarted_mid_run_loses_no_result(system):
    url = system["server"].url
    _start_workers(system, 3, BBKB_TEST_DELAY="0.5")
    sid = _study(url, "tests.workers.objective_fns:slow")
    http.post(f"{url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 15, "parallelism": 3})
    time.sleep(1.2)
    port = system["server"].port
    system["server"].kill()
    time.sleep(1.0)  # workers finish evaluations and keep retrying their results
    system["server"] = ServerProcess(system["env"], port=port).start()
    _wait(url, sid, _done, 90)
    trials = _trials(url, sid)
    assert len(trials) == 15 and all(t["status"] == "completed" for t in trials)
    for t in trials:
        assert t["value"] == pytest.approx(quadratic(*X[t["candidate"]]), abs=1e-12)


def test_the_sdk_dispatches_and_waits(system):
    from client import Client

    url = system["server"].url
    _start_workers(system, 2)
    with Client(url) as bbkb:
        study = bbkb.create_study("sdk-dispatch", candidates=X.tolist(),
                                  parameter_names=["x0", "x1"],
                                  objective="tests.workers.objective_fns:quadratic",
                                  engine={"strategy": "bbkb", "mode": "sync", "seed": 2})
        started = study.dispatch(16, parallelism=4)
        assert started.status == "running" and started.n_evaluations == 16
        done = study.wait(progress=False, poll=0.1, timeout=90)
        assert done.status == "done" and done.finished == 16
        values = [t.value for t in study.trials()]
        assert len(values) == 16 and None not in values


def test_sigterm_lets_the_evaluation_in_progress_finish(system):
    """A warm shutdown: the worker posts its result, exits 0, and nothing is evaluated twice."""
    url = system["server"].url
    _start_workers(system, 1, BBKB_TEST_DELAY="1.5")
    sid = _study(url, "tests.workers.objective_fns:slow", lease_seconds=30.0)
    http.post(f"{url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 3, "parallelism": 1})
    _wait(url, sid, _warm, 60, poll=0.05)  # warm: the next evaluation starts now
    time.sleep(0.4)  # inside the second 1.5 s evaluation
    worker = system["workers"].pop()
    worker.terminate()
    assert worker.wait(timeout=30) == 0
    done = [t for t in _trials(url, sid) if t["status"] == "completed"]
    assert len(done) == 2  # the evaluation in progress was finished and posted
    _start_workers(system, 1, BBKB_TEST_DELAY="0")
    _wait(url, sid, _done, 60)
    trials = _trials(url, sid)
    assert [(t["status"], t["attempt"]) for t in trials] == [("completed", 1)] * 3  # 1st tries


def test_the_sdk_pauses_and_resumes_a_dispatch(system):
    from client import Client, ConflictError

    with Client(system["server"].url) as bbkb:
        study = bbkb.create_study("sdk-pause", candidates=X.tolist(),
                                  parameter_names=["x0", "x1"],
                                  objective="tests.workers.objective_fns:quadratic")
        with pytest.raises(ConflictError, match="no dispatch to pause"):
            study.pause_dispatch()
        study.dispatch(6, parallelism=2)
        assert study.pause_dispatch().status == "paused" == study.dispatch_status().status
        _start_workers(system, 1)
        time.sleep(1.0)  # a paused dispatch hands out nothing after the jobs already enqueued
        assert study.dispatch_status().finished <= 2
        assert study.resume_dispatch().status == "running"
        assert study.wait(progress=False, poll=0.1, timeout=90).finished == 6
        study.pause()  # the study itself: its dispatch sends nothing, and wait() says so
        assert study.dispatch(2, parallelism=1).status == "running"
        with pytest.raises(ConflictError, match="is paused: its dispatch sends no trials"):
            study.wait(progress=False, poll=0.1, timeout=30)  # (it waited for good)


def test_a_paused_and_resumed_dispatch_evaluates_each_trial_once(system, tmp_path):
    """A pause releases the queued trials (their jobs stay in Redis) and a resume hands them
    out again. The new jobs had the old ones' ids (study, trial, attempt: a release lowers the
    attempt), so the old jobs passed the workers' check too: every trial was evaluated twice,
    and each job's chained trials with it."""
    from redis import Redis

    url, log = system["server"].url, tmp_path / "evaluations.log"
    sid = _study(url, "tests.workers.objective_fns:logged")
    r = http.post(f"{url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 6,
                                                               "parallelism": 2})
    assert r.status_code == 200, r.text
    redis = Redis.from_url(system["redis"].url)
    deadline = time.monotonic() + 30
    while redis.llen("rq:queue:bbkb") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert http.post(f"{url}/v1/studies/{sid}/dispatch/pause").status_code == 200
    deadline = time.monotonic() + 30  # the reaper gives the queued trials back
    while any(t["status"] == "running" for t in _trials(url, sid)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert http.post(f"{url}/v1/studies/{sid}/dispatch/resume").status_code == 200
    _start_workers(system, 4, BBKB_TEST_LOG=str(log), BBKB_TEST_DELAY="0.5")
    _wait(url, sid, _done, 90)
    time.sleep(1.0)  # any stale job still running would log its evaluation by now
    evaluations = log.read_text().splitlines()
    completed = [t for t in _trials(url, sid) if t["status"] == "completed"]
    assert len(completed) == 6 and len(evaluations) == 6, evaluations


def test_a_result_posted_past_the_job_timeout_is_kept(system, tmp_path):
    """The job timeout's alarm stayed armed after the objective returned: with the server
    down, the worker's retries of the result ran past it, the timeout ended the job, and the
    result was lost (the trial waited for its lease, then was evaluated again)."""
    url, log = system["server"].url, tmp_path / "evaluations.log"
    _start_workers(system, 1, BBKB_TEST_LOG=str(log), BBKB_TEST_DELAY="1.0")
    sid = _study(url, "tests.workers.objective_fns:logged", lease_seconds=60.0)
    r = http.post(f"{url}/v1/studies/{sid}/dispatch",
                    json={"n_evaluations": 1, "parallelism": 1, "job_timeout": 3})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 60
    while not log.exists():  # the worker took the job and runs the objective
        assert time.monotonic() < deadline
        time.sleep(0.02)
    port = system["server"].port
    system["server"].kill()
    time.sleep(4.5)  # the objective ends at 1 s; the result's retries pass the 3 s timeout
    system["server"] = ServerProcess(system["env"], port=port).start()
    status = _wait(url, sid, _done, 30)
    (trial,) = _trials(url, sid)
    assert status["finished"] == 1 and trial["status"] == "completed"
    assert trial["attempt"] == 1 and len(log.read_text().splitlines()) == 1
