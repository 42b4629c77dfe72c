"""The compose deployment without Docker: the exact commands of its migrate, worker-key, api and
worker services (the image's ENTRYPOINT + each service's command, read from the files) run as
plain processes against embedded PostgreSQL and Redis, and a study runs end to end through them,
with no key made by hand for the workers.

Only what Docker provides is replaced: the addresses in URLs (postgres, redis, api; the database
URL keeps compose's ``postgresql://`` scheme, user and database, and takes the embedded server's
socket and password), the listening address and port, and the directories (data, the
worker-keys volume). Everything else in the environment is what ``docker compose config`` gives
each container; the database's user and name reach it as POSTGRES_USER / POSTGRES_DB of .env."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import psutil
import pytest
from redis import Redis
from rq import Worker
from sqlalchemy.engine import URL, make_url

from client import Client, PermissionDeniedError
from service.problems import get_function
from service.processes import RedisProcess, free_port
from workers import runner

from ..shared_http import http
from .deployfiles import compose_config, dockerfile_stages, tool

N_EVALUATIONS = 24
KEY_COMMAND = ["keys", "create", "--owner", "lab"]  # README: docker compose run --rm api keys...
KEYS_VOLUME = "/run/bbkb-keys"  # the worker-keys volume's mount point


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
        self.keys_dir = tmp_path / "worker-keys"
        self.services: dict[str, Any] = {}

    def resolve(self, **variables: str) -> None:
        """``docker compose config`` with ``variables`` in .env (the database's user and name:
        the embedded server's)."""
        pg = make_url(self.local["postgres"])
        self.services = compose_config(POSTGRES_USER=str(pg.username),
                                       POSTGRES_DB=str(pg.database), **variables)["services"]

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
            url, pg = make_url(value), make_url(self.local["postgres"])
            assert (url.drivername, url.host, url.port) == ("postgresql", "postgres", 5432), value
            return URL.create(url.drivername, url.username, pg.password, pg.host, pg.port,
                              url.database, pg.query).render_as_string(hide_password=False)
        if key == "BBKB_REDIS_URL":
            assert value.startswith("redis://redis:6379/"), value
            return self.local["redis"]
        if key == "BBKB_URL":
            assert value == "http://api:8000", value
            return self.local["api"]
        if key == "BBKB_API_KEY_FILE":
            assert value.startswith(KEYS_VOLUME + "/"), value
            return str(self.keys_dir / value.removeprefix(KEYS_VOLUME + "/"))
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
            if http.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"api not ready after {timeout} s")


def test_the_compose_services_run_a_study_end_to_end(tmp_path, pg_database_url, redis,
                                                     processes):
    deploy = Deployment(tmp_path, pg_database_url, redis.url, free_port())
    deploy.resolve(BBKB_API_WORKERS="2")
    assert deploy.env("api")["BBKB_DATABASE_URL"].startswith("postgresql://")  # compose's scheme

    migrated = deploy.run("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "database schema: empty ->" in migrated.stdout
    assert "(postgresql" in migrated.stdout and "***" in migrated.stdout  # where, no password
    key_file = Path(deploy.env("worker")["BBKB_API_KEY_FILE"])
    assert deploy.env("worker-key")["BBKB_API_KEY_FILE"] == str(key_file)  # the same volume
    ensured = deploy.run("worker-key")
    assert ensured.returncode == 0 and "created" in ensured.stderr, ensured.stderr
    worker_key = key_file.read_text().strip()
    assert worker_key.startswith("bbkb_") and key_file.stat().st_mode & 0o777 == 0o600
    again = deploy.run("worker-key")  # every `docker compose up` runs it: the key stays
    assert again.returncode == 0 and "kept" in again.stderr, again.stderr
    assert key_file.read_text().strip() == worker_key
    made = deploy.run("api", *KEY_COMMAND)  # the user's own key, for the SDK
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("bbkb_") and key != worker_key

    api = deploy.start("api")
    processes.append(api)
    _wait_ready(deploy.local["api"], api)
    uvicorn_workers = [p for p in psutil.Process(api.pid).children()
                       if "spawn_main" in " ".join(p.cmdline())]  # not the resource tracker
    assert len(uvicorn_workers) == 2
    health = subprocess.run(deploy.healthcheck, env=deploy.env("api"), timeout=30, check=False)
    assert health.returncode == 0  # the image's HEALTHCHECK, against this api

    with Client(deploy.local["api"], api_key=worker_key) as as_worker:  # a worker-scoped key
        assert as_worker.studies() == []
        with pytest.raises(PermissionDeniedError, match="needs an owner key"):
            as_worker.create_study("by a worker", candidates=[[0.0], [1.0]])
    assert deploy.env("worker")["BBKB_API_KEY"] == ""  # nothing pasted into .env
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
