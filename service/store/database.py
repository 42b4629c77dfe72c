"""Database engine and transactions: SQLite (WAL, embedded default) or PostgreSQL.

:func:`transaction` is the one way to write: it commits, rolls back on error, and makes writers
serialise the same way on both backends (``BEGIN IMMEDIATE`` on SQLite takes the database write
lock up front; PostgreSQL uses a per-study advisory lock, see :func:`lock_study`). Reads go
through read-only sessions (:data:`READ_ONLY`), which on SQLite take no lock at all.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL given as a path; None for another backend, an in-memory
    database or SQLite's URI form (``sqlite:///file:...?uri=true``, not a path)."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or database in (None, "", ":memory:"):
        return None
    if parsed.query.get("uri") or database.startswith("file:"):
        return None
    return Path(database)


def make_data_dir(path: Path) -> None:
    """The SQLite file's directory, created readable by its owner only (0700: the studies, their
    candidates and results, and the API keys' hashes; with the WAL files beside the database,
    the directory is what guards them). A directory that exists is left as it is."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)


def make_engine(url: str, busy_seconds: float = 30.0, pool_size: int = 10,
                max_overflow: int = 20) -> Engine:
    """Create the engine; SQLite gets WAL, explicit transaction control and a busy timeout: how
    long a writer waits for the database's write lock (then the API answers 503, retry).
    PostgreSQL gets a pool of ``pool_size`` connections (and ``max_overflow`` more when busy)
    whose wait for a free one is bounded by ``busy_seconds`` as well, a connect timeout, and
    TCP keepalives (a peer that vanished breaks the connection in about a minute instead of
    hanging its request)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if (path := sqlite_path(url)) is not None:
            make_data_dir(path.parent)
        engine = create_engine(url, connect_args={"check_same_thread": False,
                                                  "timeout": busy_seconds})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout={int(busy_seconds * 1000)}")
            _enable_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # type: ignore[no-untyped-def]
            read_only = conn.get_execution_options().get(READ_ONLY, False)
            conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

        return engine
    if parsed.drivername == "postgresql":  # psycopg 3; the URL object, since str() of it
        parsed = parsed.set(drivername="postgresql+psycopg")  # hides the password as ***
    libpq = parsed.drivername in ("postgresql+psycopg", "postgresql+psycopg2")
    return create_engine(parsed, pool_pre_ping=True, pool_size=pool_size,
                         max_overflow=max_overflow, pool_timeout=busy_seconds,
                         connect_args={key: value for key, value in POSTGRESQL_CONNECT.items()
                                       if libpq and key not in parsed.query})


#: libpq's connection parameters of every PostgreSQL connection through psycopg, unless the
#: URL's query gives its own (``?connect_timeout=30``); other drivers (pg8000, MySQL's) take
#: none of them.
POSTGRESQL_CONNECT = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 30,
                      "keepalives_interval": 10, "keepalives_count": 3}


def _enable_wal(cursor, deadline_seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Switch the database to WAL (persistent: a no-op once any connection has done it).

    Changing the journal mode needs an exclusive lock, and SQLite answers "database is locked" at
    once, without calling the busy handler, when processes starting together race for it (see
    ``test_concurrent_migrate``): retry with a short backoff instead.
    """
    deadline = time.monotonic() + deadline_seconds
    delay = 0.01
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.25)


#: Execution option of the sessions that only read: on SQLite they begin a deferred transaction
#: (a WAL snapshot that neither waits for nor blocks the writer) instead of BEGIN IMMEDIATE.
READ_ONLY = "bbkb_read_only"


def session_factory(engine: Engine, *, read_only: bool = False) -> sessionmaker[Session]:
    """Sessions on ``engine``; ``read_only`` ones must not write (SQLite would then wait for the
    write lock inside the transaction, and fail if the snapshot went stale)."""
    bind = engine.execution_options(**{READ_ONLY: True}) if read_only else engine
    return sessionmaker(bind, expire_on_commit=False)


def database_down(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached or written at all: no connection (a
    lost one, PostgreSQL's connection errors (SQLSTATE class 08) or its shutdown (57P)), no
    free pooled connection, SQLite's write lock. Not one statement's failure (a statement or
    lock timeout, a deadlock, a serialization failure): that is about one study, and every
    other may go on."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, OperationalError):
        return False
    if exc.connection_invalidated:
        return True
    if type(exc.orig).__module__.startswith("psycopg"):
        state = getattr(exc.orig, "sqlstate", None)  # None: failed to connect at all
        return state is None or state.startswith(("08", "57P"))
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says a retry later may work (the API's 503): the database is down
    (:func:`database_down`), or PostgreSQL failed one statement (a statement or lock timeout, a
    deadlock, a serialization failure: its transaction was rolled back)."""
    return database_down(exc) or (isinstance(exc, OperationalError)
                                  and type(exc.orig).__module__.startswith("psycopg"))


def error_line(exc: BaseException) -> str:
    """The first line of a database error's message (the driver's, else the exception's); ""
    for none."""
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else ""


@contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A session inside one transaction: commit on success, roll back on any error."""
    with sessions() as session, session.begin():
        yield session


def lock_study(session: Session, study_id: int) -> None:
    """Serialise writers of one study across processes (no-op on SQLite: BEGIN IMMEDIATE)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": study_id})
