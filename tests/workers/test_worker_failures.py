"""Worker failure modes, end to end: real Redis, a real server, real ``bbkb worker`` processes.

A value the server refuses, an objective that overflows or calls sys.exit, a server down for
longer than the SDK's default retries, a dying child of ``-n N``, a bad Redis URL, a wrong API
key and an unreachable API: each ends with a clear outcome instead of a silent loss.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from service.processes import RedisProcess, ServerProcess, free_port
from workers import runner

from ..shared_http import http
from .helpers import as_at_a_terminal, dispatch_study

X = np.random.default_rng(1).random((50, 2))
HERE = "tests.workers.test_worker_failures"


# -- objectives the worker processes import (``tests.workers.test_worker_failures:...``) -------

def huge_float(x0: float, x1: float) -> float:
    return 1e308


def huge_int(x0: float, x1: float) -> int:
    return 10**400


def exits(x0: float, x1: float) -> float:
    sys.exit(3)


def verbose(x0: float, x1: float) -> float:
    raise RuntimeError("x" * 20_000)


def slow(x0: float, x1: float) -> float:
    time.sleep(1.0)
    return x0 - x1


def marked(x0: float, x1: float) -> float:
    """Leaves a file in BBKB_TEST_MARKS (the evaluation has begun), then takes BBKB_TEST_DELAY s."""
    Path(os.environ["BBKB_TEST_MARKS"], f"{os.getpid()}-{x0}").touch()
    time.sleep(float(os.environ["BBKB_TEST_DELAY"]))
    return x0 - x1


# -- fixtures and helpers ---------------------------------------------------------------------

def _study(url: str, objective: str, **fields: Any) -> int:
    return dispatch_study(url, X, objective, **{"lease_seconds": 60.0} | fields)


def _trials(url: str, sid: int) -> list[dict[str, Any]]:
    return http.get(f"{url}/v1/studies/{sid}/trials", params={"limit": 1000}).json()["trials"]


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` until it returns something truthy (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


def _dispatch(system: dict[str, Any], objective: str, n: int, **fields: Any) -> tuple[str, int]:
    url = system["server"].url
    system["workers"] += runner.spawn(system["redis"].url, 1, env={"BBKB_URL": url})
    sid = _study(url, f"{HERE}:{objective}", **fields)
    r = http.post(f"{url}/v1/studies/{sid}/dispatch",
                   json={"n_evaluations": n, "parallelism": 1})
    assert r.status_code == 200, r.text
    return url, sid


def _done(url: str, sid: int) -> bool:
    return http.get(f"{url}/v1/studies/{sid}/dispatch").json()["status"] == "done"


def _worker(redis_url: str, *args: str, **env: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "workers.runner", "--redis-url", redis_url, *args]
    return subprocess.Popen(cmd, env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)


def _exit(process: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str]:
    """The process's exit code and its output (stdout, if piped, then stderr); it is killed (and
    the test fails) if it runs on."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        out, err = process.communicate()
        raise AssertionError("the worker kept running; its output ends:\n"
                             + ((out or "") + (err or ""))[-3000:]) from None
    return process.returncode, (out or "") + err


# -- 1. values the server refuses, overflowing values, sys.exit -------------------------------

def test_a_value_the_server_refuses_fails_the_trial_for_good_with_its_reason(server_factory,
                                                                              tmp_path):
    """_report, given a value the server answers with 422, fails the trial (not retryable)."""
    from client import Client
    from workers.job import _report

    server = server_factory({"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"})
    sid = _study(server.url, f"{HERE}:slow")
    with Client(server.url) as client:
        trial = client.study(sid, fetch=False).ask(worker_id="rq-job-1").trials[0]
        payload = {"study_id": sid, "trial_id": trial.id, "worker_id": "rq-job-1"}
        assert _report(client, payload, 1e308, chain=True) is None
        after = client.study(sid, fetch=False).trial(trial.id)
    assert (after.status, after.attempt) == ("failed", 1)  # max_attempts 3: not retried
    assert "refused the value 1e+308" in after.error and "1e+100" in after.error


@pytest.mark.parametrize("objective, error, attempts", [
    ("huge_float", "outside +-1e+100", 1), ("huge_int", "outside +-1e+100", 1),
    ("exits", "SystemExit: 3", 2), ("verbose", "RuntimeError: xxx", 2)])
def test_bad_values_and_sys_exit_fail_the_trial(system, objective, error, attempts):
    """Out of range: failed for good; sys.exit and a 20,000-character error: retried."""
    url, sid = _dispatch(system, objective, 2, max_attempts=2)
    _until(lambda: _done(url, sid), 40, "the dispatch is done")
    trials = _trials(url, sid)
    assert [(t["status"], t["attempt"]) for t in trials] == [("failed", attempts)] * 2, trials
    assert all(error in t["error"] for t in trials), [t["error"] for t in trials]


# -- 2. a server down for longer than the SDK's default retries -------------------------------

def test_the_default_retry_budget_rides_out_a_minute():
    from client.client import MAX_DELAY
    from workers.job import _client

    _client.cache_clear()
    try:
        client = _client()
        shortest = sum(min(client.backoff * 2**a, MAX_DELAY) / 2 for a in range(client.retries))
    finally:
        _client.cache_clear()
    assert shortest >= 60


def test_a_result_computed_while_the_server_is_down_for_8_seconds_is_posted(system):
    url, sid = _dispatch(system, "slow", 1)
    _until(lambda: [t for t in _trials(url, sid) if t["status"] == "running"], 30, "a trial runs")
    port = system["server"].port
    system["server"].kill()
    time.sleep(8.5)  # the 1 s evaluation ends, then the post is retried (> the SDK's 3-6 s)
    system["server"] = ServerProcess(system["env"], port=port).start()
    trials = _until(lambda: [t for t in _trials(url, sid) if t["status"] == "completed"], 30,
                    "the result is posted (well before the 60 s lease expires)")
    assert [t["attempt"] for t in trials] == [1]
    assert trials[0]["value"] == pytest.approx(X[trials[0]["candidate"]] @ [1, -1], abs=1e-12)


# -- 3. ``bbkb worker -n N``: dying children, bad arguments, unreachable Redis ----------------

def test_the_parent_exits_non_zero_naming_a_child_that_died(system):
    parent = _worker(system["redis"].url, "-n", "2", BBKB_URL=system["server"].url)
    children = _until(lambda: len(psutil.Process(parent.pid).children()) == 2
                      and psutil.Process(parent.pid).children(), 30, "two children started")
    children[0].kill()
    code, err = _exit(parent)
    assert code == 1, err
    assert f"(pid {children[0].pid}) was killed by SIGKILL" in err
    assert not psutil.pid_exists(children[1].pid)  # the other was stopped (and reaped)


def _parent(system: dict[str, Any], delay: float = 2.0, n: int = 2,
            ignored: tuple[signal.Signals, ...] = ()
            ) -> tuple[subprocess.Popen[str], int, list, Path]:
    """``bbkb worker -n n`` in a session of its own (as at a terminal: its own process group,
    signals at their defaults but ``ignored``),
    once each worker process is inside an evaluation of ``delay`` s: (parent, study, the trials
    being evaluated, the directory where each evaluation leaves a file as it begins)."""
    url, marks = system["server"].url, Path(system["env"]["BBKB_DATA_DIR"], "marks")
    marks.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-m", "workers.runner", "--redis-url", system["redis"].url, "-n",
         str(n)],
        env={**os.environ, "BBKB_URL": url, "BBKB_TEST_DELAY": str(delay),
             "BBKB_TEST_MARKS": str(marks)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=as_at_a_terminal(*ignored))
    sid = _study(url, f"{HERE}:marked")
    http.post(f"{url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 6, "parallelism": n})
    _until(lambda: len({mark.name.split("-")[0] for mark in marks.iterdir()}) == n, 60,
           "every worker process evaluates")
    running = [t for t in _trials(url, sid) if t["status"] == "running"]
    assert len(running) == n
    return parent, sid, running, marks


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # exited, not yet reaped
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("signum, n", [(signal.SIGINT, 2), (signal.SIGHUP, 2),
                                       (signal.SIGHUP, 1)], ids=["int-2", "hup-2", "hup-1"])
def test_ctrl_c_at_a_terminal_lets_every_evaluation_in_progress_finish(system, signum, n):
    """The terminal sends SIGINT (Ctrl-C) or SIGHUP (closed) to the whole foreground group: a
    ``-n N`` parent passes it on once (its worker processes ignore both), a single worker takes
    SIGHUP as SIGTERM, so every evaluation finishes and is posted, and no further one begins.
    (Before, SIGHUP killed the worker processes with their evaluations.)"""
    parent, sid, running, marks = _parent(system, n=n)
    children = psutil.Process(parent.pid).children()
    begun = len(list(marks.iterdir()))
    os.killpg(parent.pid, signum)
    code, err = _exit(parent)
    assert code == 0 and "Traceback" not in err, err
    assert all(_gone(child.pid) for child in children)
    trials = {t["id"]: t for t in _trials(system["server"].url, sid)}
    assert [(trials[t["id"]]["status"], trials[t["id"]]["attempt"]) for t in running] == [
        ("completed", 1)] * n
    assert len(list(marks.iterdir())) == begun


@pytest.mark.parametrize("gap", [0.3, 1.5])
def test_a_second_ctrl_c_stops_the_evaluations_at_once(system, gap):
    """A cold stop on demand: a second Ctrl-C ends the 30 s evaluations in progress at once
    (their leases then run out), also when it comes within RQ's one-second window for
    duplicate signals, and within the parent's 0.2 s poll."""
    parent, sid, running, _ = _parent(system, delay=30.0)
    os.killpg(parent.pid, signal.SIGINT)
    time.sleep(gap)
    started = time.monotonic()
    os.killpg(parent.pid, signal.SIGINT)
    code, err = _exit(parent, timeout=40)
    assert code == 0 and time.monotonic() - started < 8, err
    assert err.count("cold shut down") == 2, err  # RQ's log (stdout), one per worker process
    trials = {t["id"]: t for t in _trials(system["server"].url, sid)}
    assert [trials[t["id"]]["status"] for t in running] == ["running"] * 2


def test_a_parent_killed_by_sigkill_leaves_no_worker_running(system):
    """No handler sees a SIGKILL: each worker process notices that its parent is gone (within
    a second), stops warm, posts its result and exits instead of running on orphaned."""
    parent, sid, running, _ = _parent(system)
    children = psutil.Process(parent.pid).children()
    parent.kill()
    parent.communicate()
    _until(lambda: all(_gone(child.pid) for child in children), 30, "the workers exited")
    trials = {t["id"]: t for t in _trials(system["server"].url, sid)}
    assert [trials[t["id"]]["status"] for t in running] == ["completed"] * 2


def test_a_sigint_ignored_at_start_stays_ignored(system):
    """A parent started with SIGINT ignored (a background job of a script) does not stop on
    SIGINT, nor do its worker processes, also once a warm stop is under way (RQ then installs
    its cold-stop handler for SIGINT too); SIGTERM still stops them warm."""
    parent, sid, running, _ = _parent(system, delay=4.0, ignored=(signal.SIGINT,))
    children = psutil.Process(parent.pid).children()
    os.killpg(parent.pid, signal.SIGINT)
    time.sleep(1.0)
    assert parent.poll() is None and not any(_gone(child.pid) for child in children)
    parent.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the warm stop is under way: RQ has its cold-stop handler installed
    os.killpg(parent.pid, signal.SIGINT)  # ... for SIGTERM only
    code, err = _exit(parent)
    assert code == 0 and "Traceback" not in err, err
    trials = {t["id"]: t for t in _trials(system["server"].url, sid)}
    assert [trials[t["id"]]["status"] for t in running] == ["completed"] * 2


def test_a_stop_while_redis_is_down_is_quiet(system):
    """RQ waits out a Redis outage; a SIGTERM meanwhile stops the worker with exit 0 and no
    traceback, although RQ cannot deregister it (bbkb demo's Ctrl-C stops Redis as well)."""
    from redis import Redis
    from rq import Worker

    worker = _worker(system["redis"].url, BBKB_URL=system["server"].url)
    connection = Redis.from_url(system["redis"].url)
    _until(lambda: Worker.all(connection=connection), 30, "the worker registered")
    connection.close()
    system["redis"].stop()
    assert worker.stderr is not None
    for line in worker.stderr:  # RQ's log line: its dequeue failed, and is retried
        if "could not connect to redis" in line.lower():
            break
    worker.send_signal(signal.SIGTERM)
    code, err = _exit(worker)
    assert code == 0 and "Traceback" not in err, err


def test_a_worker_lists_itself_again_after_redis_restarts_empty(system):
    """Redis killed and restarted empty on the same port (no persistence): the worker rides it
    out and is listed again (RQ lists a worker only as it starts), in RQ's sets and in GET
    /v1/queue, and evaluates the trials dispatched afterwards."""
    from redis import Redis
    from rq import Queue, Worker

    url, redis = system["server"].url, system["redis"]
    system["workers"] += runner.spawn(redis.url, 1, env={"BBKB_URL": url})
    connection = Redis.from_url(redis.url)

    def listed() -> list[str]:  # in rq:workers and in the queue's set (GET /v1/queue's)
        return [w.name for w in Worker.all(connection=connection)
                if w in Worker.all(queue=Queue(runner.QUEUE, connection=connection))]

    names = _until(listed, 30, "the worker registered")
    _until(lambda: any("b" in c["flags"] for c in connection.client_list()), 30,  # blocked in
           "the worker waits for a job")  # its dequeue, which RQ retries (at other moments it
    # quits, and the runner's next worker registers itself as it starts)
    assert redis.proc is not None
    redis.proc.kill()  # SIGKILL: the data is lost
    redis.proc.wait()
    redis.start()  # an empty Redis on the same port (the fixture stops it)
    assert _until(listed, 30, "the worker is listed again") == names
    state = _until(lambda: (r := http.get(f"{url}/v1/queue").json())["workers"] and r, 30,
                   "GET /v1/queue lists the worker")
    assert [w["name"] for w in state["workers"]] == names, state
    connection.close()
    sid = _study(url, "tests.workers.objective_fns:quadratic")
    r = http.post(f"{url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 3, "parallelism": 1})
    assert r.status_code == 200, r.text
    _until(lambda: _done(url, sid), 60, "the worker evaluated the trials dispatched after")
    assert sorted(t["status"] for t in _trials(url, sid)) == ["completed"] * 3


_LOST_AT_START = """
import sys, time
from redis.exceptions import ConnectionError
from rq.worker.base import BaseWorker
from workers import runner

def subscribe(worker):  # Redis lost as each worker starts, before RQ's signal handlers
    print("starting", flush=True)
    time.sleep(1.0)
    raise ConnectionError("lost as the worker started")

BaseWorker.subscribe = subscribe
sys.exit(runner.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("moment", ["starting", "quit on an error"], ids=["start", "wait"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_after_rq_quit_while_it_started_is_quiet(system, signum, moment):
    """RQ quits if Redis is lost while it starts, before its signal handlers: the worker waits
    for Redis and starts another (every 3 s here), and a stop meanwhile, in the wait or in the
    next start, ends it with exit 0 (a SIGTERM there used to kill it: a CI run)."""
    worker = subprocess.Popen([sys.executable, "-c", _LOST_AT_START, "--redis-url",
                               system["redis"].url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "BBKB_URL": system["server"].url})
    assert worker.stdout is not None
    seen = 0
    for line in worker.stdout:  # RQ's log and the injected start's mark
        seen += moment in line
        if seen == 2:  # the second worker's (the first's start is before the worker is ready)
            break
    worker.send_signal(signum)
    code, err = _exit(worker)
    assert seen == 2 and code == 0 and "Traceback" not in err, err


class _FailingStream:
    """A log stream whose writes raise ``error``: a signal handler's exception raised while a
    handler writes, at a chosen moment."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def write(self, text: str) -> None:
        raise self.error

    def flush(self) -> None:
        pass


def test_a_stop_raised_while_rq_logs_is_not_swallowed(capfd):
    """The likely loss of test_a_stop_while_redis_is_down_is_quiet's SIGTERM (once, in CI under
    load): RQ's StopRequested raised inside a log handler's emit, which logging catches and
    reports. The handlers RQ's records reach re-raise it, RQ's own (a worker process without
    logging set up) or a root handler's; other errors in a handler stay logging's."""
    from rq.exceptions import StopRequested

    loggers = [logging.getLogger(name) for name in ("", "rq.worker", "rq.job")]
    saved = [(logger.handlers[:], logger.propagate, logger.level) for logger in loggers]
    root, worker = loggers[0], loggers[1]
    try:
        for logger in loggers:  # as in a worker process (pytest's capture left aside)
            logger.handlers.clear()
        runner._stops_survive_logging()
        assert worker.handlers  # RQ's
        for handler in worker.handlers:
            handler.setStream(_FailingStream(StopRequested()))
        with pytest.raises(StopRequested):
            worker.error("could not connect to Redis instance; retrying in 1 seconds...")
        for handler in worker.handlers:
            handler.setStream(_FailingStream(ValueError("a broken stream")))
        worker.error("could not connect to Redis instance; retrying in 2 seconds...")
        assert "a broken stream" in capfd.readouterr().err  # logging's own report

        for logger in loggers[1:]:  # logging set up at the root: RQ adds no handler
            logger.handlers.clear()
            logger.propagate = True
        root.addHandler(logging.StreamHandler(_FailingStream(StopRequested())))
        runner._stops_survive_logging()
        assert not worker.handlers
        with pytest.raises(StopRequested):
            worker.error("could not connect to Redis instance; retrying in 4 seconds...")
    finally:
        for logger, (handlers, propagate, level) in zip(loggers, saved, strict=True):
            logger.handlers[:] = handlers
            logger.propagate, logger.level = propagate, level


def test_a_ctrl_c_while_a_worker_process_starts_is_not_a_keyboard_interrupt(capfd):
    """spawn() blocks SIGINT until the new process ignores it: Ctrl-Cs from its first
    millisecond on leave it to its start-up (here: failing on an unusable Redis, exit 1)."""
    children = runner.spawn(f"redis://127.0.0.1:{free_port()}/0", 2)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGINT)
        time.sleep(0.002)
    assert [child.wait(timeout=30) for child in children] == [1, 1]
    err = capfd.readouterr().err
    assert "KeyboardInterrupt" not in err and err.count("bbkb worker: Redis") == 2, err


@pytest.mark.parametrize("n", ["0", "-2"])
def test_no_processes_is_a_usage_error(n, capsys):
    with pytest.raises(SystemExit) as stopped:
        runner.main(["-n", n, "--redis-url", "redis://127.0.0.1:1/0"])
    assert stopped.value.code == 2 and "--processes must be at least 1" in capsys.readouterr().err


def test_an_invalid_module_list_stops_the_worker_at_start():
    """Before, the worker ran and failed every import-path trial for good."""
    code, err = _exit(_worker("redis://127.0.0.1:1/0", BBKB_OBJECTIVE_MODULES="my-lab"))
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("bbkb worker: BBKB_OBJECTIVE_MODULES: 'my-lab' is not a module"), err


@pytest.mark.parametrize("redis_url", ["redis://127.0.0.1:{port}/0", "nonsense://x"])
def test_an_unusable_redis_is_a_one_line_error(redis_url):
    code, err = _exit(_worker(redis_url.format(port=free_port())))
    assert code == 1 and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("bbkb worker: Redis"), err


# -- 4. credentials and the API checked at start-up -------------------------------------------

def test_a_wrong_api_key_stops_the_worker_at_start(server_factory, tmp_path):
    redis = RedisProcess().start()
    try:
        server = server_factory({"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "keys"})
        code, err = _exit(_worker(redis.url, BBKB_URL=server.url, BBKB_API_KEY="bbkb_wrong"))
    finally:
        redis.stop()
    assert code == 1 and "Traceback" not in err
    assert "refused the worker's key" in err and "401" in err, err


def test_an_unreachable_api_stops_the_worker_after_the_retry_budget():
    redis = RedisProcess().start()
    try:
        code, err = _exit(_worker(redis.url, BBKB_URL=f"http://127.0.0.1:{free_port()}",
                                  BBKB_WORKER_RETRY_SECONDS="1"))
    finally:
        redis.stop()
    assert code == 1 and "Traceback" not in err
    assert "the API (BBKB_URL) is unusable" in err and "attempt(s)" in err, err


@pytest.mark.parametrize("n, log_format", [(1, "text"), (2, None), (2, "json")])
def test_a_ready_worker_process_says_so_once_with_its_password_masked(server_factory, tmp_path,
                                                                      n, log_format):
    """The audit: at the default level (info) ``bbkb worker`` printed nothing from start to
    stop; only ``bbkb queue`` showed it alive. Each worker process logs one line once ready:
    its queue, Redis (the password masked) and API; ``-n N`` processes log as ``bbkb`` does
    (text unless BBKB_LOG_FORMAT says otherwise)."""
    import json


    redis = RedisProcess(password="sekret").start()
    try:
        server = server_factory({"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"})
        log = tmp_path / "worker.log"
        env = {k: v for k, v in os.environ.items() if k != "BBKB_LOG_FORMAT"}
        env |= {"BBKB_URL": server.url} | ({"BBKB_LOG_FORMAT": log_format} if log_format else {})
        with log.open("w") as stderr:
            worker = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "worker", "-n", str(n), "--redis-url",
                 redis.url], env=env, stderr=stderr)
            _until(lambda: log.read_text().count("worker ready") == n, 60, "ready lines")
            worker.send_signal(signal.SIGTERM)
            try:
                code = worker.wait(timeout=30)
            finally:
                worker.kill()  # (no-op once it exited; its children stop with it)
    finally:
        redis.stop()
    lines = log.read_text().splitlines()
    assert code == 0 and len(lines) == n and "sekret" not in log.read_text(), lines
    for line in lines:
        if log_format == "json":
            record = json.loads(line)
            assert (record["level"], record["msg"], record["queue"]) == (
                "info", "worker ready", "bbkb")
            assert record["redis"] == redis.url.replace(":sekret@", ":***@")
        else:
            assert " INFO bbkb.worker worker ready queue=bbkb redis=redis://:***@127.0.0.1:" \
                in line and f"api={server.url} pid=" in line, line


def test_passwords_in_urls_are_masked():
    for url, shown in (
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
            ("rediss://user:p@ss@h/0", "rediss://user:***@h/0"),
            ("redis://pw@h", "redis://***@h"),
            ("unix:///run/redis.sock?db=1&password=pw&x=1",
             "unix:///run/redis.sock?db=1&password=***&x=1")):
        assert runner.masked_url(url) == shown


def test_a_signal_name_is_reported_for_a_killed_child(capsys):
    """supervise() on real processes: a child killed by a signal is named with its signal."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.send_signal(signal.SIGTERM)
    assert runner.supervise([child, other], poll=0.05) == 1
    assert other.poll() is not None  # the other was stopped
    err = capsys.readouterr().err
    assert f"worker process 1 of 2 (pid {child.pid}) was killed by SIGTERM" in err


def test_a_set_stopping_event_stops_the_children_from_the_loop():
    """The SIGTERM handler only sets ``stopping``; supervise() then stops the running children
    itself (waiting on them inside a signal handler could deadlock) and returns 0."""
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                for _ in range(2)]
    stopping = threading.Event()
    stopping.set()
    assert runner.supervise(children, poll=0.05, stopping=stopping) == 0
    assert [child.returncode for child in children] == [-signal.SIGTERM] * 2


#: A child that takes a first SIGTERM as RQ does (a warm shutdown: it goes on) and ends, with
#: code 7, at the second (RQ's cold shutdown).
ENDS_AT_THE_SECOND_SIGTERM = """
import signal, sys, time
received = []
def on_term(*_):
    received.append(1)
    if len(received) == 2:
        sys.exit(7)
    print("warm", flush=True)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


@contextlib.contextmanager
def _ready(code: str, n: int = 2) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` Python processes running ``code``, once each printed 'ready'; killed afterwards."""
    children = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
                for _ in range(n)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        yield children
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait()
            if child.stdout is not None:
                child.stdout.close()


def test_a_second_sigterm_is_passed_on_to_the_children_at_once():
    """The parent's handler: the first SIGTERM only sets ``stopping`` (supervise then sends the
    children their SIGTERM); a second one sends them another without waiting, so jobs stop now
    rather than when they end."""
    with _ready(ENDS_AT_THE_SECOND_SIGTERM) as children:
        stopping = threading.Event()
        handler = runner.on_signal(children, stopping)
        handler()
        assert stopping.is_set() and all(child.poll() is None for child in children)
        handler()  # the second signal: one SIGTERM each now, supervise's stop() sends the other
        for child in children:  # (received before the next: two at once would count as one)
            assert child.stdout is not None and child.stdout.readline() == b"warm\n"
        assert runner.supervise(children, poll=0.05, stopping=stopping) == 0
        assert [child.returncode for child in children] == [7, 7]  # their own exit, not -9


def test_a_third_signal_kills_children_deaf_to_sigterm():
    """A job stuck where no Python signal handler runs (C code, blocking I/O) ignores SIGTERM in
    effect: the parent's third signal sends SIGKILL, so Ctrl-C always ends ``-n N``."""
    deaf = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    with _ready(deaf) as children:
        handler = runner.on_signal(children, threading.Event())
        handler(), handler()  # stopping, then a SIGTERM each: ignored
        time.sleep(0.2)
        assert all(child.poll() is None for child in children)
        handler()
        assert [child.wait(timeout=10) for child in children] == [-signal.SIGKILL] * 2


def test_a_sigterm_ignored_at_start_still_stops_the_worker_processes(system):
    """A parent that inherited SIGTERM as ignored still stops its worker processes with SIGTERM
    (they take it: before, they inherited the SIG_IGN too and Ctrl-C waited forever)."""
    parent, sid, running, _ = _parent(system, ignored=(signal.SIGTERM,))
    os.killpg(parent.pid, signal.SIGINT)
    code, err = _exit(parent)
    assert code == 0 and "Traceback" not in err, err
    trials = {t["id"]: t for t in _trials(system["server"].url, sid)}
    assert [trials[t["id"]]["status"] for t in running] == ["completed"] * 2


def test_sigterm_during_the_start_up_checks_is_a_clean_stop():
    """Children still checking the API (here: for its whole retry budget) die of the SIGTERM
    their parent passes on; that was reported as 'worker process 1 was killed', exit 1."""
    redis = RedisProcess().start()
    try:
        parent = _worker(redis.url, "-n", "2", BBKB_URL=f"http://127.0.0.1:{free_port()}",
                         BBKB_WORKER_RETRY_SECONDS="60")
        children = _until(lambda: len(psutil.Process(parent.pid).children()) == 2
                          and psutil.Process(parent.pid).children(), 30, "two children started")
        time.sleep(1.0)  # they are past the Redis ping, retrying the API
        assert all(child.is_running() for child in children)
        parent.send_signal(signal.SIGTERM)
        code, err = _exit(parent)
    finally:
        redis.stop()
    assert code == 0 and "killed" not in err and "Traceback" not in err, err
    assert not any(psutil.pid_exists(child.pid) for child in children)


def test_the_redis_url_is_not_on_the_workers_command_lines(monkeypatch):
    """spawn() put --redis-url on each worker's command line, where any local user reads it
    (``ps``), password and all; it goes in their environment. (Popen faked: what is checked
    is what spawn passes it.)"""
    started: list[tuple[list[str], dict[str, str]]] = []

    class Popen:
        def __init__(self, cmd, env, stdin):  # type: ignore[no-untyped-def]
            started.append((cmd, env))

    monkeypatch.setattr(runner.subprocess, "Popen", Popen)
    runner.spawn("redis://:s3cret@127.0.0.1:1/0", 2, env={"BBKB_REDIS_URL": "redis://other"})
    assert len(started) == 2
    for cmd, env in started:
        assert not any("s3cret" in part for part in cmd), cmd
        assert env["BBKB_REDIS_URL"] == "redis://:s3cret@127.0.0.1:1/0"
