"""The compose deployment without Docker: the exact commands of its migrate, api and worker
services (the image's ENTRYPOINT + each service's command, read from the files) run as plain
processes against embedded PostgreSQL and Redis, and a study runs end to end through them.

Only what Docker's network provides is replaced: service host names in URLs (postgres, redis,
api), the listening address and port, and the data directory. Everything else in the
environment is what ``docker compose config`` gives each container."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import pytest
from redis import Redis
from rq import Worker

from client import Client
from service.problems import get_function
from service.processes import RedisProcess, free_port
from workers import runner

from .deployfiles import compose_config, dockerfile_stages, tool

N_EVALUATIONS = 24
KEY_COMMAND = ["keys", "create", "--owner", "lab"]  # README: docker compose run --rm api keys...


class Deployment:
    """The image's entry point and environment, and each service as compose resolves it."""

    def __init__(self, tmp_path: Path, database_url: str, redis_url: str, port: int) -> None:
        final = dockerfile_stages()[-1]
        self.entrypoint = [tool(final.exec_form("ENTRYPOINT")[0])]
        self.healthcheck = final.healthcheck()
        self.image_env = {k: v for k, v in final.env().items() if k != "PATH"}
        self.local = {"postgres": database_url, "redis": redis_url,
                      "api": f"http://127.0.0.1:{port}"}
        self.port, self.tmp_path = port, tmp_path
        self.services: dict[str, Any] = {}

    def resolve(self, **variables: str) -> None:
        self.services = compose_config(**variables)["services"]

    def command(self, service: str) -> list[str]:
        return self.entrypoint + self.services[service]["command"]

    def env(self, service: str) -> dict[str, str]:
        """The container's environment (image ENV, then compose), docker addresses replaced."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("BBKB_")}
        container = {**self.image_env, **{k: v for k, v in
                                          self.services[service]["environment"].items()
                                          if v is not None}}
        return base | {k: self._localise(k, v) for k, v in container.items()}

    def _localise(self, key: str, value: str) -> str:
        if key == "BBKB_DATABASE_URL":
            assert "@postgres:5432/" in value, value  # the compose postgres service
            return self.local["postgres"]
        if key == "BBKB_REDIS_URL":
            assert value.startswith("redis://redis:6379/"), value
            return self.local["redis"]
        if key == "BBKB_URL":
            assert value == "http://api:8000", value
            return self.local["api"]
        return {"BBKB_HOST": "127.0.0.1", "BBKB_PORT": str(self.port),
                "BBKB_DATA_DIR": str(self.tmp_path)}.get(key, value)

    def run(self, service: str, *args: str) -> subprocess.CompletedProcess[str]:
        """``docker compose run --rm SERVICE [ARGS]``: ARGS, if given, replace the command."""
        cmd = self.entrypoint + list(args) if args else self.command(service)
        return subprocess.run(cmd, env=self.env(service), cwd=self.tmp_path, capture_output=True,
                              text=True, timeout=120, check=False)

    def start(self, service: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.command(service), env=self.env(service), cwd=self.tmp_path)


@pytest.fixture
def redis() -> Iterator[RedisProcess]:
    server = RedisProcess().start()
    yield server
    server.stop()


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    runner.stop(started, timeout=20)  # SIGTERM (uvicorn and RQ shut down warm), then SIGKILL


def _wait_ready(url: str, api: subprocess.Popen[bytes], timeout: float = 90) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert api.poll() is None, f"api exited with code {api.returncode}"
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"api not ready after {timeout} s")


def test_the_compose_services_run_a_study_end_to_end(tmp_path, pg_database_url, redis,
                                                     processes):
    deploy = Deployment(tmp_path, pg_database_url, redis.url, free_port())
    deploy.resolve(BBKB_API_WORKERS="2")

    migrated = deploy.run("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "database schema: empty ->" in migrated.stdout
    made = deploy.run("api", *KEY_COMMAND)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("bbkb_")

    api = deploy.start("api")
    processes.append(api)
    _wait_ready(deploy.local["api"], api)
    uvicorn_workers = [p for p in psutil.Process(api.pid).children()
                       if "spawn_main" in " ".join(p.cmdline())]  # not the resource tracker
    assert len(uvicorn_workers) == 2
    health = subprocess.run(deploy.healthcheck, env=deploy.env("api"), timeout=30, check=False)
    assert health.returncode == 0  # the image's HEALTHCHECK, against this api

    deploy.resolve(BBKB_API_WORKERS="2", BBKB_API_KEY=key)  # the key pasted into .env
    assert deploy.env("worker")["BBKB_API_KEY"] == key
    processes.extend(deploy.start("worker") for _ in range(2))

    branin = get_function("branin")
    low, high = branin.bounds[:, 0], branin.bounds[:, 1]
    candidates = low + (high - low) * np.random.default_rng(0).random((400, 2))
    with Client(deploy.local["api"], api_key=key) as client:
        study = client.create_study("compose", candidates=candidates, objective="function:branin",
                                    engine={"strategy": "bbkb", "mode": "async", "seed": 0})
        study.dispatch(N_EVALUATIONS, parallelism=4)
        done = study.wait(progress=False, poll=0.2, timeout=180)
        trials = list(study.trials())
    assert done.status == "done" and done.finished == N_EVALUATIONS
    assert len(trials) == N_EVALUATIONS
    for trial in trials:  # one value each: the objective at the trial's candidate
        assert trial.status == "completed"
        expected = float(branin.objective(candidates[trial.candidate]))
        assert trial.value == pytest.approx(expected, rel=1e-12, abs=1e-12)

    workers = Worker.all(connection=Redis.from_url(redis.url))
    assert len(workers) == 2  # both worker processes joined the bbkb queue
    assert all(trial.attempt == 1 for trial in trials)  # none was evaluated twice
    # a job goes on with the trials handed back with its results: fewer jobs than evaluations
    assert 0 < sum(w.successful_job_count for w in workers) <= N_EVALUATIONS
