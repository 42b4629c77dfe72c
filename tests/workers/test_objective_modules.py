"""The workers' allow-list of objective modules (``BBKB_OBJECTIVE_MODULES``), the security
boundary: a worker never imports an objective's module that its own list does not allow, even
when the server allowed it; it pauses the dispatch and gives the trial back with the reason (a
fault of its setup, not of the trial: before, it failed the trial for good, and one such worker
in a pool failed nearly every trial). Real Redis, a real server and real ``bbkb worker``
processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workers import runner

from ..shared_http import http
from .helpers import dispatch_study

X = np.random.default_rng(2).random((40, 2))
FORBIDDEN = "tests.workers.forbidden_objective"


def _trials(url: str, sid: int) -> list[dict[str, Any]]:
    return http.get(f"{url}/v1/studies/{sid}/trials", params={"limit": 1000}).json()["trials"]


def _dispatch_and_finish(system: dict[str, Any], objective: str, worker_env: dict[str, str],
                         n: int = 2, parallelism: int = 1,
                         sid: int | None = None) -> list[dict[str, Any]]:
    """Dispatch ``n`` evaluations of ``objective`` to one worker with ``worker_env`` (a new
    study and worker, or study ``sid`` and the workers already there); the study's trials once
    the dispatch is done, or paused (by a worker that refused it)."""
    url = system["server"].url
    if sid is None:
        sid = dispatch_study(url, X, objective, name=uuid.uuid4().hex, max_attempts=3,
                             lease_seconds=30.0)
        system["workers"] += runner.spawn(system["redis"].url, 1,
                                          env={"BBKB_URL": url, **worker_env})
    r = http.post(f"{url}/v1/studies/{sid}/dispatch", json={
        "n_evaluations": n, "parallelism": parallelism, "objective": objective})
    assert r.status_code == 200, r.text  # the server (BBKB_OBJECTIVE_MODULES=tests) allows it
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if http.get(f"{url}/v1/studies/{sid}/dispatch").json()["status"] in ("done",
                                                                                "paused"):
            return _trials(url, sid)
        time.sleep(0.1)
    raise AssertionError(f"the dispatch never finished: {_trials(url, sid)}")


@pytest.mark.parametrize("worker_modules", ["tests.workers.objective_fns", "", "mylab,testsx"])
def test_a_worker_never_imports_a_module_its_own_list_does_not_allow(system, tmp_path,
                                                                     worker_modules):
    """The server allows ``tests``; the worker's narrower list does not cover the module: it is
    never imported nor called, the dispatch is paused and the trial is back in the pool with the
    reason. Before, the worker imported and ran whatever the server stored (os:system
    included)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"BBKB_OBJECTIVE_MODULES": worker_modules, "BBKB_TEST_MARKS": str(marks)}
    trials = _dispatch_and_finish(system, f"{FORBIDDEN}:touch", env)
    assert [(t["status"], t["attempt"]) for t in trials] == [("pending", 0)], trials  # released
    assert "'tests.workers.forbidden_objective' is not allowed on this worker" in \
        trials[0]["error"], trials[0]["error"]
    assert "BBKB_OBJECTIVE_MODULES" in trials[0]["error"]
    assert "the dispatch is paused" in trials[0]["error"]
    assert list(marks.iterdir()) == []  # neither imported nor called


def test_a_worker_runs_exactly_what_its_list_allows(system, tmp_path):
    """A worker whose list is just the forbidden module: it imports and runs that module's
    objective, and refuses the server-allowed ``tests.workers.objective_fns`` (the dispatch
    pauses)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"BBKB_OBJECTIVE_MODULES": FORBIDDEN, "BBKB_TEST_MARKS": str(marks)}
    trials = _dispatch_and_finish(system, f"{FORBIDDEN}:touch", env)
    assert [t["status"] for t in trials] == ["completed"] * 2, trials
    assert sorted(p.name for p in marks.iterdir()) == ["called", "imported"]
    system["workers"] = runner.stop(system["workers"], timeout=5) or []
    trials = _dispatch_and_finish(system, "tests.workers.objective_fns:quadratic", env, n=1)
    assert [(t["status"], t["attempt"]) for t in trials] == [("pending", 0)], trials  # released
    assert "'tests.workers.objective_fns' is not allowed on this worker" in trials[0]["error"]


@pytest.mark.parametrize("objective, reason", [
    ("tests.workers.objective_fns:missing",
     "module 'tests.workers.objective_fns' (imported from "),
    ("tests.workers.test_worker_failures:free_port", "defined in module 'service.processes'"),
    ("tests.workers.test_worker_failures:X", "but it is a ndarray, not a function")])
def test_an_objective_no_worker_can_run_pauses_the_dispatch_and_fails_no_trial(system,
                                                                               objective,
                                                                               reason):
    """A typo in the function's name (or a function the allowed module imported, or not a
    function) is the setup's fault, as a missing module is: the dispatch pauses and its trials
    go back to the pool, the attempt not counted. Before, the 25 evaluations of a 4-slot
    dispatch were 'done' within a second, every trial failed for good (its candidate never
    proposed again). A dispatch of the corrected objective then runs on the same trials."""
    url = system["server"].url
    sid = dispatch_study(url, X, objective, max_attempts=3, lease_seconds=30.0)
    system["workers"] += runner.spawn(system["redis"].url, 2, env={"BBKB_URL": url})
    _dispatch_and_finish(system, objective, {}, n=25, parallelism=4, sid=sid)
    deadline = time.monotonic() + 30  # jobs taken before the pause give their trials back
    trials = _trials(url, sid)
    while any(t["status"] == "running" for t in trials) and time.monotonic() < deadline:
        time.sleep(0.1)
        trials = _trials(url, sid)
    assert http.get(f"{url}/v1/studies/{sid}/dispatch").json()["status"] == "paused"
    assert {t["status"] for t in trials} == {"pending"}, trials
    assert {t["attempt"] for t in trials} == {0}, trials
    with_reason = [t["error"] for t in trials if t["error"]]
    assert with_reason and all(reason in e and "the dispatch is paused" in e and
                               "dispatch again with the corrected --objective" in e
                               for e in with_reason), with_reason
    if objective.endswith(":missing"):
        assert "has no 'missing'; if the module changed, restart the workers" in with_reason[0]

    trials = _dispatch_and_finish(system, "tests.workers.objective_fns:quadratic", {}, n=3,
                                  parallelism=2, sid=sid)
    counts = http.get(f"{url}/v1/studies/{sid}").json()["counts"]
    assert counts.get("completed") == 3 and not counts.get("failed"), (counts, trials)


def test_an_invalid_list_imports_nothing(monkeypatch, tmp_path):
    """A list that does not parse allows no import path (built-ins still resolve); a worker
    started with one stops at start (test_worker_failures), this covers a list changed under
    a running process."""
    from workers.objectives import resolve

    monkeypatch.setenv("BBKB_TEST_MARKS", str(tmp_path))
    monkeypatch.delitem(sys.modules, FORBIDDEN, raising=False)
    monkeypatch.setenv("BBKB_OBJECTIVE_MODULES", "tests.workers,my-lab")
    with pytest.raises(ValueError, match="'my-lab' is not a module prefix"):
        resolve(f"{FORBIDDEN}:touch")
    assert FORBIDDEN not in sys.modules and not list(Path(tmp_path).iterdir())
    assert resolve("function:branin").delay == 0.0


def test_only_public_functions_defined_in_an_allowed_module_are_objectives(monkeypatch):
    """helper-46's review: with ``tests`` allowed, ``tests:__init__`` rewrote the package's
    __name__ from a categorical parameter, and a function the module imported from elsewhere
    (``from service.processes import free_port``) was callable through it."""
    from workers.objectives import Refused, resolve

    monkeypatch.setenv("BBKB_OBJECTIVE_MODULES", "tests")
    for private in ("tests:__init__", "tests.workers.objective_fns:_x"):
        with pytest.raises(Refused, match="is a private name"):
            resolve(private)
    with pytest.raises(Refused, match="defined in module 'service.processes'"):
        resolve("tests.workers.test_worker_failures:free_port")
    with pytest.raises(Refused, match="is a ndarray, not a function"):
        resolve("tests.workers.test_worker_failures:X")
    with pytest.raises(Refused, match="has no 'missing'"):
        resolve("tests.workers.objective_fns:missing")
    assert resolve("tests.workers.objective_fns:quadratic").defined_in == (
        "tests.workers.objective_fns")


def test_resolve_checks_the_list_before_any_import(monkeypatch, tmp_path):
    """In process: resolve() refuses with Refused, a ValueError (job.py pauses the dispatch and
    gives the trial back) and the module is not in sys.modules afterwards; ``mylab`` does not
    cover ``mylabx``."""
    from workers.objectives import resolve

    monkeypatch.setenv("BBKB_TEST_MARKS", str(tmp_path))
    monkeypatch.delitem(sys.modules, FORBIDDEN, raising=False)
    for modules in ("", "tests.workers.forbidden", "tests.workers.objective_fns,os"):
        monkeypatch.setenv("BBKB_OBJECTIVE_MODULES", modules)
        with pytest.raises(ValueError, match="is not allowed on this worker"):
            resolve(f"{FORBIDDEN}:touch")
        with pytest.raises(ValueError, match="'subprocess' is not allowed"):
            resolve("subprocess:run")
    assert FORBIDDEN not in sys.modules and not list(Path(tmp_path).iterdir())
    monkeypatch.setenv("BBKB_OBJECTIVE_MODULES", "*")
    assert resolve("tests.workers.objective_fns:quadratic").evaluate(0, [], {"x0": 0.3,
                                                                           "x1": 0.7}) == 0.0
    monkeypatch.setenv("BBKB_OBJECTIVE_MODULES", "")  # the built-ins always resolve
    assert resolve("function:branin").delay == 0.0


@pytest.mark.parametrize("objective", [
    "function:branin?delay=1e400", "function:branin?delay=nan", "function:branin?delay=-1",
    "function:branin?noise=-0.1", "function:branin?noise=inf", "function:branin?dim=inf"])
def test_resolve_refuses_options_that_are_not_finite_or_negative(objective):
    """Before, resolve accepted them and every evaluation then failed (OverflowError in
    time.sleep) or drew NaN noise."""
    from workers.objectives import resolve

    with pytest.raises(ValueError, match="finite|>= 0|integer"):
        resolve(objective)


def test_a_worker_holding_a_worker_key_pauses_a_dispatch_it_cannot_run(server_factory,
                                                                       tmp_path):
    """Compose's workers hold a worker key (`keys ensure --scope worker`), which may not pause
    a dispatch at large: the refusal's `pause_dispatch(objective=...)` was a 403, the trial
    failed (its attempt counted) and the dispatch ran on. A worker key may pause the dispatch
    of the objective it names."""
    from service.processes import RedisProcess

    redis = RedisProcess().start()
    env = {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "keys", "BBKB_REDIS_URL": redis.url,
           "BBKB_REAPER_INTERVAL": "0.2", "BBKB_OBJECTIVE_MODULES": "tests"}
    workers: list[Any] = []
    try:
        server = server_factory(env)
        keys = {}
        for scope in ("owner", "worker"):
            made = subprocess.run([sys.executable, "-m", "service.cli", "keys", "create",
                                   "--owner", "lab", "--scope", scope],
                                  env={**os.environ, **env}, capture_output=True, text=True,
                                  check=True)
            keys[scope] = made.stdout.strip()
        owner = {"Authorization": f"Bearer {keys['owner']}"}
        body = {"name": "refused", "candidates": X.tolist(), "objective": f"{FORBIDDEN}:touch",
                "max_attempts": 3, "lease_seconds": 30.0,
                "engine": {"strategy": "bbkb", "mode": "async", "seed": 0}}
        made = http.post(f"{server.url}/v1/studies", json=body, headers=owner)
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        workers += runner.spawn(redis.url, 1, env={
            "BBKB_URL": server.url, "BBKB_API_KEY": keys["worker"],
            "BBKB_OBJECTIVE_MODULES": "mylab"})
        started = http.post(f"{server.url}/v1/studies/{sid}/dispatch", headers=owner,
                            json={"n_evaluations": 2, "parallelism": 1})
        assert started.status_code == 200, started.text
        deadline = time.monotonic() + 60
        while http.get(f"{server.url}/v1/studies/{sid}/dispatch",
                       headers=owner).json()["status"] != "paused":
            assert time.monotonic() < deadline, "the dispatch was not paused"
            time.sleep(0.1)
        trials = http.get(f"{server.url}/v1/studies/{sid}/trials",
                          headers=owner).json()["trials"]
        assert [(t["status"], t["attempt"]) for t in trials] == [("pending", 0)], trials
        assert "the dispatch is paused" in trials[0]["error"]
        at_large = http.post(f"{server.url}/v1/studies/{sid}/dispatch/pause",
                             headers={"Authorization": f"Bearer {keys['worker']}"})
        assert at_large.status_code == 403  # without ?objective=: an owner's decision
    finally:
        runner.stop(workers, timeout=5)
        redis.stop()
