"""The server's allow-list of objective modules (``BBKB_OBJECTIVE_MODULES``) and the shared
objective grammar, against real server processes. The workers' side (the security boundary):
``tests/workers/test_objective_modules.py``."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from redis import Redis
from rq import Queue

from service.processes import RedisProcess, ServerProcess, free_port
from service.settings import Settings
from service.ui.optimum import noiseless_values

from ..shared_http import http

SPACE = {"search_space": [{"name": "command", "type": "categorical",
                           "choices": ["touch /tmp/bbkb-objective-modules-test"]}],
         "n_candidates": 1}
BOX = {"search_space": [{"name": "x0", "type": "float", "low": 0.0, "high": 1.0},
                        {"name": "x1", "type": "float", "low": 0.0, "high": 1.0}],
       "n_candidates": 20}


def _server(tmp_path: Path, modules: str | None, name: str = "db",
            redis_url: str | None = None) -> ServerProcess:
    env = {"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / f'{name}.sqlite'}", "BBKB_AUTH": "none"}
    if redis_url is not None:
        env["BBKB_REDIS_URL"] = redis_url
    env["BBKB_OBJECTIVE_MODULES"] = modules if modules is not None else ""
    return ServerProcess(env)


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    """One server per setting: the default (empty), ``mylab``, ``*``."""
    tmp = tmp_path_factory.mktemp("objective-modules")
    started = {key: _server(tmp, value, key) for key, value in
               (("default", ""), ("mylab", "mylab, otherlab.objectives"), ("any", "*"))}
    try:
        yield {key: server.start().url for key, server in started.items()}
    finally:
        for server in started.values():
            server.stop()


def _create(url: str, objective: str, space: dict | None = None) -> httpx2.Response:
    return http.post(f"{url}/v1/studies", json={"name": uuid.uuid4().hex, "objective": objective,
                                                  **(space or SPACE)})


def test_os_system_is_refused_by_default_with_how_to_allow_it(servers):
    """The audit's exploit: a study with objective os:system and a categorical `command`.
    Before, it was created (and dispatched workers ran the shell command)."""
    r = _create(servers["default"], "os:system")
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == "objective"
    assert "module 'os' is not allowed" in body["detail"]
    assert "BBKB_OBJECTIVE_MODULES" in body["detail"]
    assert "on the server and on the workers" in body["detail"]
    assert "BBKB_OBJECTIVE_MODULES is empty" in body["detail"]
    # nor can a dispatch name it for a study with a harmless objective
    sid = _create(servers["default"], "function:branin", BOX).json()["id"]
    r = http.post(f"{servers['default']}/v1/studies/{sid}/dispatch",
                    json={"n_evaluations": 1, "objective": "os:system"})
    assert r.status_code == 422 and r.json()["field"] == "objective", r.text
    assert "module 'os' is not allowed" in r.json()["detail"]
    assert _create(servers["default"], "function:branin?delay=0.5", BOX).status_code == 201
    r = _create(servers["default"], "dataset:abalone?delay=0.5&noise=0.01", BOX)
    assert r.status_code == 422 and "row index in the data set" in r.json()["detail"], r.text


PREFIX_CASES = [
    ("mylab:f", True), ("mylab.objectives:f", True), ("mylab.a.b:f", True),
    ("otherlab.objectives:f", True), ("otherlab.objectives.deep:f", True),
    ("mylabx:f", False), ("mylabx.objectives:f", False), ("otherlab:f", False),
    ("otherlab.other:f", False), ("otherlab.objectivesx:f", False), ("os:system", False),
    ("subprocess:run", False), ("tests.workers.objective_fns:quadratic", False)]


def test_a_prefix_allows_its_module_and_submodules_only(servers):
    """BBKB_OBJECTIVE_MODULES='mylab, otherlab.objectives'."""
    for objective, allowed in PREFIX_CASES:
        r = _create(servers["mylab"], objective)
        assert r.status_code == (201 if allowed else 422), (objective, r.text)
        if not allowed:
            module = objective.partition(":")[0]
            assert r.json()["field"] == "objective"
            assert f"module {module!r} is not allowed" in r.json()["detail"]
            assert "'mylab', 'otherlab.objectives'" in r.json()["detail"]


def test_only_a_star_allows_any_module(servers):
    for objective in ("os:system", "anything.at.all:f", "mylabx:f"):
        assert _create(servers["any"], objective).status_code == 201
        assert _create(servers["default"], objective).status_code == 422


def test_a_stored_study_whose_module_is_no_longer_allowed_cannot_be_dispatched(tmp_path):
    """Created while the server allowed ``tests``; after a restart with the default list its
    dispatch is refused the same way (before: accepted, or 409 for want of Redis)."""
    server = _server(tmp_path, "tests").start()
    try:
        r = _create(server.url, "tests.workers.objective_fns:quadratic", BOX)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
    finally:
        server.stop()
    server = _server(tmp_path, "").start()
    try:
        r = http.post(f"{server.url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 2})
        assert r.status_code == 422 and r.json()["field"] == "objective", r.text
        assert "module 'tests.workers.objective_fns' is not allowed" in r.json()["detail"]
        assert http.get(f"{server.url}/v1/studies/{sid}").status_code == 200  # still readable
    finally:
        server.stop()


def test_a_dispatch_whose_module_is_no_longer_allowed_is_not_resumed_nor_run(tmp_path):
    """The dispatches were started while the server allowed ``tests`` (no worker ran them)."""
    redis = RedisProcess().start()
    try:
        server = _server(tmp_path, "tests", redis_url=redis.url).start()
        try:
            sid = _create(server.url, "tests.workers.objective_fns:quadratic", BOX).json()["id"]
            r = http.post(f"{server.url}/v1/studies/{sid}/dispatch", json={"n_evaluations": 2})
            assert r.status_code == 200, r.text
            assert http.post(f"{server.url}/v1/studies/{sid}/dispatch/pause").status_code == 200
            running = _create(server.url, "tests.workers.objective_fns:quadratic", BOX).json()["id"]
            r = http.post(f"{server.url}/v1/studies/{running}/dispatch",
                            json={"n_evaluations": 2})
            assert r.status_code == 200, r.text
        finally:
            server.stop()
        Redis.from_url(redis.url).flushall()  # the jobs the first server enqueued
        server = _server(tmp_path, "", redis_url=redis.url).start()
        try:
            r = http.post(f"{server.url}/v1/studies/{sid}/dispatch/resume")
            assert r.status_code == 422 and r.json()["field"] == "objective", r.text
            status = http.get(f"{server.url}/v1/studies/{sid}/dispatch").json()["status"]
            assert status == "paused"
            # a dispatch left running: the dispatcher pauses it rather than enqueue trials
            # that every worker with the new list would fail for good
            deadline = time.monotonic() + 30
            while http.get(f"{server.url}/v1/studies/{running}/dispatch").json()[
                    "status"] != "paused":
                assert time.monotonic() < deadline, "the running dispatch was not paused"
                time.sleep(0.2)
            assert Queue("bbkb", connection=Redis.from_url(redis.url)).count == 0
        finally:
            server.stop()
    finally:
        redis.stop()


@pytest.mark.parametrize("value", ["my-lab", "mylab,,other", "mylab.", "os;rm -rf", "a b",
                                   ".mylab", "mylab,*x"])
def test_a_bad_setting_is_refused(value):
    """Before, an unknown setting was ignored."""
    with pytest.raises(ValueError, match="is not a module prefix"):
        Settings(objective_modules=value)


def test_a_bad_setting_stops_the_server_at_start(tmp_path):
    """The server does not start, and ``bbkb serve`` exits 1 naming the setting (the values
    all take the path above: one of them through the processes)."""
    value = "os;rm -rf"
    with pytest.raises(RuntimeError, match="server exited"):
        _server(tmp_path, value).start(timeout=30)
    env = {"BBKB_OBJECTIVE_MODULES": value, "BBKB_DATA_DIR": str(tmp_path), "PATH": "/usr/bin"}
    out = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--no-auth", "--port",
                          str(free_port())], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 1 and "objective_modules" in out.stderr.lower(), out.stderr


def test_good_settings_are_parsed():
    assert Settings(objective_modules=" mylab , otherlab.objectives ").objective_modules == (
        "mylab", "otherlab.objectives")
    assert Settings(objective_modules="").objective_modules == ()
    assert Settings(objective_modules="*").objective_modules == ("*",)


@pytest.mark.parametrize("options, why", [
    ("delay=1e400", "finite"), ("delay=nan", "finite"), ("delay=inf", "finite"),
    ("delay=-1", ">= 0"), ("noise=-0.5", ">= 0"), ("noise=inf", "finite"),
    ("noise=nan", "finite"), ("dim=-inf", "dim must be an integer")])
def test_options_must_be_finite_and_delay_and_noise_nonnegative(servers, options, why):
    """Before, ?delay=1e400 (and nan, -1) was stored and every dispatched trial failed with an
    OverflowError (or ValueError) in time.sleep."""
    from service.objectives import OPTIONS

    key = options.partition("=")[0]
    for objective in [f"{head}?{options}" for head, kind in (
            ("function:branin", "function"), ("dataset:abalone", "dataset"),
            ("mylab.objectives:f", "import")) if key in OPTIONS[kind]]:
        r = _create(servers["mylab"], objective, BOX)
        assert r.status_code == 422 and r.json()["field"] == "objective", r.text
        assert why in r.json()["detail"], r.json()["detail"]
        sid = _create(servers["mylab"], "function:branin", BOX).json()["id"]
        r = http.post(f"{servers['mylab']}/v1/studies/{sid}/dispatch",
                        json={"n_evaluations": 1, "objective": objective})
        assert r.status_code == 422 and r.json()["field"] == "objective", r.text


def test_a_delay_not_below_the_job_timeout_is_refused(tmp_path):
    """The audit: dispatching function:levy?delay=1e308 answered 200 and the worker failed the
    trial with an OverflowError in time.sleep; ?delay=99999999 slept until the job timeout
    killed it. A dispatch's delay must be below its job_timeout, a study's below the longest
    job_timeout a dispatch takes (checked against the dispatch's when it runs the study's)."""
    from service.api.schemas import DispatchRequest
    from service.objectives import MAX_JOB_TIMEOUT

    bound = [m.le for m in DispatchRequest.model_fields["job_timeout"].metadata
             if hasattr(m, "le")]
    assert bound == [MAX_JOB_TIMEOUT]
    redis = RedisProcess().start()
    server = _server(tmp_path, "", redis_url=redis.url).start()
    try:
        def dispatch(sid: int, **body: object) -> httpx2.Response:
            return http.post(f"{server.url}/v1/studies/{sid}/dispatch",
                               json={"n_evaluations": 1, "parallelism": 1, **body})

        sid = _create(server.url, "function:levy", BOX).json()["id"]
        for objective, timeout in (("function:levy?delay=1e308", 3600),
                                   ("function:levy?delay=99999999", 3600),
                                   ("function:levy?delay=3600", 3600),
                                   ("function:levy?delay=7200", 7200)):
            r = dispatch(sid, objective=objective, job_timeout=timeout)
            assert r.status_code == 422 and r.json()["field"] == "objective", r.text
            assert "option delay" in r.json()["detail"]
            assert f"job_timeout ({timeout} s)" in r.json()["detail"], r.text
        assert dispatch(sid, objective="function:levy?delay=3599").status_code == 200
        assert dispatch(sid, objective="function:levy?delay=3600",
                        job_timeout=7200).status_code == 200

        r = _create(server.url, "function:levy?delay=1e308", BOX)
        assert r.status_code == 422 and r.json()["field"] == "objective", r.text
        assert f"longest job_timeout a dispatch takes ({MAX_JOB_TIMEOUT} s)" in r.json()[
            "detail"]
        r = _create(server.url, "function:levy?delay=5000", BOX)  # a long job_timeout fits it
        assert r.status_code == 201, r.text
        slow = r.json()["id"]
        r = dispatch(slow)  # the study's objective, the default job_timeout 3600
        assert r.status_code == 422 and "job_timeout (3600 s)" in r.json()["detail"], r.text
        assert dispatch(slow, job_timeout=5001).status_code == 200
    finally:
        server.stop()
        redis.stop()


@pytest.mark.parametrize("objective, why", [
    ("function:branin?dealy=0.5", "unknown option 'dealy'"),
    ("function:branin?delay=1&delay=2", "given twice"),
    ("dataset:abalone?dim=3", "unknown option 'dim'"),
    ("mylab.objectives:f?noise=0.1", "unknown option 'noise'")])
def test_unknown_or_repeated_options_are_refused(servers, objective, why):
    """Before, a misspelt option (?dealy=0.5) or one the objective never reads (a data set's
    ?dim=, an import path's ?noise=) was stored and silently did nothing. New objectives (a
    study's, a dispatch's) are refused; stored ones still parse as before (ignored keys, the
    last of a repeated one), so that a study stored with one keeps working."""
    from service.objectives import parse_objective

    r = _create(servers["mylab"], objective, BOX)
    assert r.status_code == 422 and r.json()["field"] == "objective", r.text
    assert why in r.json()["detail"], r.json()["detail"]
    sid = _create(servers["mylab"], "function:branin", BOX).json()["id"]
    r = http.post(f"{servers['mylab']}/v1/studies/{sid}/dispatch",
                    json={"n_evaluations": 1, "objective": objective})
    assert r.status_code == 422 and why in r.json()["detail"], r.text
    with pytest.raises(ValueError, match=why):
        parse_objective(objective, strict=True)
    keys = {pair.partition("=")[0] for pair in objective.partition("?")[2].split("&")}
    assert set(parse_objective(objective).options) == keys  # as stored studies read it


def test_one_grammar_for_the_server_the_workers_and_the_dashboard():
    from service.objectives import parse_objective

    assert parse_objective("function:branin?delay=0.5&dim=2") == (
        "function", "branin", {"delay": 0.5, "dim": 2.0})
    assert parse_objective("mylab.objectives:f?delay=0") == ("import", "mylab.objectives:f",
                                                              {"delay": 0.0})
    assert parse_objective("mylab.objectives:f").module == "mylab.objectives"
    with pytest.raises(ValueError, match="finite"):
        parse_objective("dataset:abalone?delay=1e400")
    # the dashboard: a stored objective with a bad option has no known optimum (before: the
    # regret curve of an objective no worker can evaluate)
    assert noiseless_values("dataset:abalone?noise=-1", 4177, 8, lambda: None) is None
    assert noiseless_values("dataset:abalone?noise=0.1", 4177, 8, lambda: None) is not None
