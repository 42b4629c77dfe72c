"""Worker-side faults found by a review (session 15), each reproduced end to end with real
processes where it matters: a real Redis, a real API server (SQLite, PostgreSQL where said) and
real ``bbkb worker`` processes. Every test here failed before its fix (the docstrings describe
what used to happen): a queued trial has no lease until a worker takes its job, repair leaves
taken trials alone, an objective's own ValueError is retried, a refused module pauses the
dispatch instead of failing the trial, a revoked key stops the worker, failure reasons are
escaped, ``-n N`` notices a worker process that exits with code 0, and a worker rides out a
Redis outage that ends a job (session 16)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from service.processes import RedisProcess
from workers import runner

from ..shared_http import http
from .helpers import dispatch_study
from .test_worker_failures import _done, _exit, _trials, _until, _worker

X = np.random.default_rng(1).random((50, 2))
HERE = "tests.workers.test_worker_faults"


# -- objectives the worker processes import (``tests.workers.test_worker_faults:...``) ---------

def math_domain(x0: float, x1: float) -> float:
    """An instrument glitch that surfaces as a ValueError, as math/numpy/parsing errors do."""
    return math.log(x0 - 2.0)  # ValueError: math domain error


def marked(x0: float, x1: float) -> float:
    """Leaves a file in BBKB_TEST_MARKS as each evaluation begins, then takes BBKB_TEST_DELAY s."""
    Path(os.environ["BBKB_TEST_MARKS"], f"{os.getpid()}-{time.monotonic_ns()}").touch()
    time.sleep(float(os.environ.get("BBKB_TEST_DELAY", "1.0")))
    return x0 - x1


def exits_quietly(x0: float, x1: float) -> float:
    """A library that ends the process with status 0 (os._exit(0))."""
    os._exit(0)


def undecodable_output(x0: float, x1: float) -> float:
    """An error quoting a tool's output decoded with surrogateescape (non-UTF-8 bytes)."""
    raise RuntimeError("simulator said: " + b"bad \xff byte".decode("utf-8", "surrogateescape"))


def nul_in_output(x0: float, x1: float) -> float:
    """An error quoting a binary instrument reply (a NUL byte)."""
    raise RuntimeError("instrument replied: " + b"OK\x00\x01".decode("latin-1"))


# -- helpers ----------------------------------------------------------------------------------

def _study(url: str, objective: str, **fields: Any) -> int:
    return dispatch_study(url, X, f"{HERE}:{objective}", **{"lease_seconds": 60.0} | fields)


def _start_dispatch(url: str, sid: int, n: int, parallelism: int = 1,
                    headers: dict[str, str] | None = None) -> None:
    r = http.post(f"{url}/v1/studies/{sid}/dispatch", headers=headers,
                    json={"n_evaluations": n, "parallelism": parallelism})
    assert r.status_code == 200, r.text


def _registered(redis_url: str, n: int) -> None:
    from redis import Redis
    from rq import Worker

    connection = Redis.from_url(redis_url)
    try:
        _until(lambda: len(Worker.all(connection=connection)) >= n, 60,
               f"{n} worker process(es) registered")
    finally:
        connection.close()


def _queued(redis_url: str) -> None:
    from redis import Redis
    from rq import Queue

    connection = Redis.from_url(redis_url)
    try:
        _until(lambda: Queue(runner.QUEUE, connection=connection).count, 30, "a job queued")
    finally:
        connection.close()


def _evaluating(system: dict[str, Any], tmp_path: Path, workers: int,
                delay: float) -> tuple[str, Path, int]:
    """``workers`` worker processes, and a dispatch of one ``marked`` evaluation taking
    ``delay`` s that has begun: (API url, marks directory, study id)."""
    url, marks = system["server"].url, tmp_path / "marks"
    marks.mkdir()
    system["workers"] += runner.spawn(system["redis"].url, workers, env={
        "BBKB_URL": url, "BBKB_TEST_MARKS": str(marks), "BBKB_TEST_DELAY": str(delay)})
    _registered(system["redis"].url, workers)
    sid = _study(url, "marked")
    _start_dispatch(url, sid, 1)
    _until(lambda: list(marks.iterdir()), 30, "the evaluation began")
    return url, marks, sid


# -- 1. a ValueError raised by the objective fails the trial for good -------------------------

def test_an_objective_raising_valueerror_is_retried_like_any_other_exception(system):
    """README: 'An exception (or sys.exit) fails the trial with its text (retried up to
    max_attempts)'. workers/job.py catches ValueError around both resolve() and run(), so a
    ValueError from the objective itself (math domain error, float('n/a'), numpy/scipy input
    errors) fails the trial for good at the first attempt, without its exception type."""
    url = system["server"].url
    system["workers"] += runner.spawn(system["redis"].url, 1, env={"BBKB_URL": url})
    sid = _study(url, "math_domain", max_attempts=2)
    _start_dispatch(url, sid, 1)
    _until(lambda: _done(url, sid), 40, "the dispatch is done")
    trials = _trials(url, sid)
    assert [(t["status"], t["attempt"]) for t in trials] == [("failed", 2)], trials
    assert "ValueError: math domain error" in trials[0]["error"], trials[0]["error"]


# -- 2. a Redis restart duplicates every evaluation in progress --------------------------------

def test_a_redis_restart_does_not_duplicate_an_evaluation_in_progress(system, tmp_path):
    """Redis restarts (in-memory: its jobs are gone) while a worker, which rides out the outage,
    is evaluating a trial. Dispatcher.repair sees a running trial older than 10 s whose job id
    is missing from Redis and enqueues it again under the same worker id: an idle worker then
    evaluates the same trial a second time (and, with a deterministic objective, both jobs are
    handed the same chained trials after it). Every trial in flight at a Redis restart is
    evaluated twice, each twin beyond the study's parallelism."""
    from redis import Redis

    url, marks, sid = _evaluating(system, tmp_path, workers=2, delay=16)
    begun = time.monotonic()
    running = [t for t in _trials(url, sid) if t["status"] == "running"]
    assert len(running) == 1, running
    job = "rq:job:" + running[0]["worker_id"].removeprefix("rq-")  # the job carrying it
    port = system["redis"].port
    system["redis"].stop()
    # empty, as after any restart without persistence; the same password
    redis = RedisProcess(port=port, password=system["redis"].password).start()
    try:
        # a few dispatcher passes once the trial is past repair's 10 s grace: any result wakes
        # the dispatcher, and repair runs on every 20th pass (else within ~10 s)
        other = _study(url, "marked", name="waker")
        waker = http.post(f"{url}/v1/studies/{other}/suggestions",
                            json={"worker_id": "waker", "count": 1}).json()["trials"][0]["id"]
        time.sleep(max(0.0, 10.5 - (time.monotonic() - begun)))
        connection = Redis.from_url(redis.url)
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline and not connection.exists(job):
            http.post(f"{url}/v1/studies/{other}/trials/{waker}/complete", json={"value": 0.5})
        connection.close()
        _until(lambda: _done(url, sid), 30, "the dispatch is done")
        time.sleep(1.0)
        assert [(t["status"], t["attempt"]) for t in _trials(url, sid)] == [("completed", 1)]
        assert len(list(marks.iterdir())) == 1, "the trial in progress was evaluated twice"
    finally:
        runner.stop(system["workers"], timeout=5)
        redis.stop()


def test_a_worker_rides_out_a_redis_outage_that_ends_a_job(system, tmp_path):
    """Redis goes down while a job evaluates, and stays down past the job's end. RQ cannot
    record the end, quit its work loop ("found an unhandled exception, quitting") and the
    worker process exited with code 1: with ``-n N`` the parent then stopped every worker, so a
    Redis restart of a few seconds took the whole pool down. Now a new worker starts in the
    same process once Redis answers, and takes the next dispatch's jobs."""
    url, marks, sid = _evaluating(system, tmp_path, workers=1, delay=3)
    port = system["redis"].port
    system["redis"].stop()  # down past the job's end
    _until(lambda: _done(url, sid), 30, "the result reached the API")
    time.sleep(1.0)  # the job's end meets the missing Redis
    system["redis"] = RedisProcess(port=port, password=system["redis"].password).start()
    try:
        _registered(system["redis"].url, 1)  # a new worker in the same process
        assert [w.poll() for w in system["workers"]] == [None]
        _start_dispatch(url, sid, 1)
        _until(lambda: len(list(marks.iterdir())) == 2 and _done(url, sid), 60,
               "the next dispatch was evaluated")
        assert [t["status"] for t in _trials(url, sid)] == ["completed"] * 2
    finally:
        runner.stop(system["workers"], timeout=5)
        system["redis"].stop()


# -- 3. a revoked worker key drains the queue into abandoned trials ----------------------------

def _keys(env: dict[str, str], *args: str) -> str:
    """``bbkb keys ARGS``; its standard output (a new key for ``create``)."""
    out = subprocess.run([sys.executable, "-m", "service.cli", "keys", *args],
                         env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_worker_whose_key_is_revoked_stops_instead_of_abandoning_trials(server_factory,
                                                                          tmp_path):
    """The key check happens only at start. Revoked mid-run (key rotation), the worker keeps
    taking jobs: it evaluates each trial in full, its result post gets a 401 (an RQ
    traceback), the lease runs out, the trial is handed out again to the same worker, and after
    max_attempts it is abandoned: every candidate the dispatch hands out is lost, and none is
    left for a worker with a valid key. Expected: the worker stops taking jobs (as it does at
    start with a refused key: exit 1 with one line), so the trials are left, unevaluated, to
    the lease and to workers that can report."""
    redis = RedisProcess().start()
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "keys", "BBKB_REDIS_URL": redis.url,
           "BBKB_REAPER_INTERVAL": "0.2"}
    worker = None
    try:
        server = server_factory(env)
        worker_key, user_key = (_keys(env, "create", "--owner", "lab") for _ in range(2))
        user = {"Authorization": f"Bearer {user_key}"}
        body = {"name": "revoked", "candidates": X.tolist(), "objective": f"{HERE}:marked",
                "parameter_names": ["x0", "x1"], "lease_seconds": 3.0, "max_attempts": 2,
                "engine": {"strategy": "bbkb", "mode": "async", "seed": 0,
                           "kernel": {"name": "rbf", "lengthscale": 0.3}}}
        r = http.post(f"{server.url}/v1/studies", json=body, headers=user)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        worker = _worker(redis.url, BBKB_URL=server.url, BBKB_API_KEY=worker_key,
                         BBKB_TEST_MARKS=str(marks), BBKB_TEST_DELAY="1.0")
        _registered(redis.url, 1)
        _start_dispatch(server.url, sid, 6, headers=user)
        _until(lambda: list(marks.iterdir()), 30, "the first evaluation began")
        _keys(env, "revoke", worker_key)
        begun = len(list(marks.iterdir()))
        deadline = time.monotonic() + 15
        while worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        after = len(list(marks.iterdir())) - begun
        trials = http.get(f"{server.url}/v1/studies/{sid}/trials", headers=user).json()
        statuses = [t["status"] for t in trials["trials"]]
        assert worker.poll() not in (None, 0) and after <= 1, (
            f"worker exit code {worker.poll()}, {after} evaluations begun after the "
            f"revocation; trials: {statuses}")
    finally:
        if worker is not None:
            if worker.poll() is None:
                worker.kill()
            worker.communicate()
        redis.stop()


# -- 4. ``bbkb worker -n N`` misses a worker process that exits with status 0 -------------------

def test_the_parent_notices_a_worker_process_that_exits_with_status_0(system):
    """README: 'with -n N it exits 1, naming the process, as soon as one of its workers dies'.
    supervise() only reports a non-zero exit: a worker process ended by os._exit(0) (or by a
    SIGTERM an objective sent to its own process group) disappears silently, the pool runs on
    one short, and once every process is gone so the parent exits 0."""
    url = system["server"].url
    parent = _worker(system["redis"].url, "-n", "2", BBKB_URL=url)
    try:
        _registered(system["redis"].url, 2)
        sid = _study(url, "exits_quietly")
        _start_dispatch(url, sid, 1)
        code, err = _exit(parent, timeout=20)
    finally:
        if parent.poll() is None:
            for child in psutil.Process(parent.pid).children(recursive=True):
                child.kill()
            parent.kill()
            parent.communicate()
    assert code == 1 and "exited with code 0" in err, err


# -- 5. a failure reason the API cannot take leaves the trial to its lease ---------------------

def _evaluate_in_process(url: str, objective: str) -> tuple[Any, dict[str, Any]]:
    """workers.job._evaluate on a trial of a new study (max_attempts 3), in this process."""
    from client import Client
    from workers.job import _evaluate

    sid = _study(url, objective)
    with Client(url, retries=0) as client:
        trial = client.study(sid, fetch=False).ask(worker_id="rq-review-1").trials[0]
        payload = {"study_id": sid, "trial_id": trial.id, "worker_id": "rq-review-1",
                   "candidate": trial.candidate, "vector": X[trial.candidate].tolist(),
                   "parameters": {"x0": X[trial.candidate][0], "x1": X[trial.candidate][1]},
                   "objective": f"{HERE}:{objective}", "lease_seconds": 60.0}
        try:
            outcome: Any = _evaluate(client, payload)
        except Exception as exc:  # noqa: BLE001 - what the RQ job would die of
            outcome = exc
    return outcome, http.get(f"{url}/v1/studies/{sid}/trials/{trial.id}").json()


def test_an_error_text_with_undecodable_bytes_still_fails_the_trial(server_factory, tmp_path):
    """A reason holding a lone surrogate (bytes decoded with surrogateescape) is refused by the
    SDK's own validation of FailRequest (InvalidArgument: 'unable to parse raw data as a unicode
    string'; httpx2's JSON encoding would raise UnicodeEncodeError next): study.fail raises out
    of _evaluate, the job dies with it, and the trial stays running until its lease expires
    (300 s by default), its reason lost; after max_attempts it shows 'lease expired' instead of
    the objective's error."""
    server = server_factory({"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"})
    outcome, trial = _evaluate_in_process(server.url, "undecodable_output")
    assert outcome is None, repr(outcome)
    assert (trial["status"], trial["attempt"]) == ("pending", 1), trial
    assert "RuntimeError: simulator said: bad" in (trial["error"] or ""), trial


def test_an_error_text_with_a_nul_byte_fails_the_trial_on_postgresql(server_factory,
                                                                     pg_database_url, tmp_path):
    """On PostgreSQL the fail endpoint answers 500 to a reason holding a NUL byte (text columns
    cannot store it; the API promises that bad input is never a 500): the worker's fail raises,
    and the trial waits out its lease with its reason lost, as above."""
    server = server_factory({"BBKB_DATABASE_URL": pg_database_url,
                             "BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"})
    outcome, trial = _evaluate_in_process(server.url, "nul_in_output")
    assert outcome is None, repr(outcome)
    assert (trial["status"], trial["attempt"]) == ("pending", 1), trial
    assert "RuntimeError: instrument replied: OK" in (trial["error"] or ""), trial


# -- 6. one worker with a narrower BBKB_OBJECTIVE_MODULES fails nearly every trial -------------

def test_one_misconfigured_worker_does_not_fail_the_trials_the_others_can_run(system,
                                                                            tmp_path):
    """Known: a worker whose own list refuses the module fails the trial for good. Worse than
    'some candidates': it refuses in milliseconds and is back on the queue at once, so it wins
    nearly every job while the correctly configured worker evaluates (measured: 19 of 20 trials
    failed for good, the dispatch 'done' with one evaluation). The refusal says nothing about
    the candidate. (The fix changes what test_objective_modules expects of a lone refusing
    worker: its trials are left pending rather than failed.)"""
    url, marks = system["server"].url, tmp_path / "marks"
    marks.mkdir()
    system["workers"] += runner.spawn(system["redis"].url, 1, env={
        "BBKB_URL": url, "BBKB_TEST_MARKS": str(marks), "BBKB_TEST_DELAY": "0.3"})
    system["workers"] += runner.spawn(system["redis"].url, 1, env={
        "BBKB_URL": url, "BBKB_OBJECTIVE_MODULES": "otherlab"})
    _registered(system["redis"].url, 2)
    sid = _study(url, "marked")
    _start_dispatch(url, sid, 6, parallelism=2)
    _until(lambda: any(t["error"] for t in _trials(url, sid)), 30, "the refusal is reported")
    time.sleep(3.0)
    failed = [t for t in _trials(url, sid) if t["status"] == "failed"]
    assert failed == [], f"{len(failed)} trial(s) failed for good: {failed[0]['error']}"


# -- 7. a job waiting in the queue loses its trial's lease -------------------------------------

def test_a_job_waiting_in_the_queue_longer_than_the_lease_loses_nothing(system, tmp_path):
    """The lease starts when the dispatcher enqueues the job, not when a worker takes it, and
    nothing renews it while the job waits: with more parallelism than worker processes (the SDK's
    default parallelism is 8; compose starts 2 worker processes) a queued trial's lease runs out,
    the reaper hands it out again in a second job (a duplicate evaluation later), and after
    max_attempts it is abandoned before any worker looked at it. The worker then evaluates the
    stale jobs anyway: it never checks that the trial is still its own before evaluating."""
    url, marks = system["server"].url, tmp_path / "marks"
    marks.mkdir()
    system["workers"] += runner.spawn(system["redis"].url, 1, env={
        "BBKB_URL": url, "BBKB_TEST_MARKS": str(marks), "BBKB_TEST_DELAY": "3"})
    _registered(system["redis"].url, 1)
    sid = _study(url, "marked", lease_seconds=2.0, max_attempts=2)
    _start_dispatch(url, sid, 2, parallelism=2)  # one worker: the second job waits 3 s
    _until(lambda: _done(url, sid), 60, "the dispatch is done")
    time.sleep(4.0)  # any stale job still queued is taken and evaluated meanwhile
    outcomes = [(t["kind"], t["status"], t["attempt"]) for t in _trials(url, sid)]
    begun = len(list(marks.iterdir()))
    assert (outcomes, begun) == ([("suggested", "completed", 1)] * 2, 2), (outcomes, begun)


def test_a_burst_worker_that_loses_redis_exits_1_with_one_line(system, tmp_path):
    """A burst worker (``--burst``: drain the queue, then exit 0) whose Redis goes down while
    a job evaluates cannot tell an empty queue from a lost one: it exits 1, with one line
    naming the cause (not RQ's traceback), after the job's result reached the API."""
    url, marks = system["server"].url, tmp_path / "marks"
    marks.mkdir()
    sid = _study(url, "marked")
    _start_dispatch(url, sid, 1)
    _queued(system["redis"].url)  # before the worker starts: it would exit at once
    worker = _worker(system["redis"].url, "--burst", BBKB_URL=url, BBKB_TEST_MARKS=str(marks),
                     BBKB_TEST_DELAY="3")
    try:
        _until(lambda: list(marks.iterdir()), 30, "the evaluation began")
        system["redis"].stop()  # down past the job's end, for good
        code, output = _exit(worker, timeout=60)
        assert _done(url, sid)  # the result went to the API
    finally:
        if worker.poll() is None:
            worker.kill()
    lines = output.strip().splitlines()
    assert code == 1, output
    assert "Traceback" not in output, output
    assert lines[-1].startswith("bbkb worker: lost Redis before the queue was drained ("), output
    assert any("found an unhandled exception, quitting... (ConnectionError: " in line
               for line in lines), output  # RQ's own log line, without its traceback
