"""Schema management: upgrade to the migrations' head, or refuse a stale schema with advice."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

import migrations

SCRIPTS = Path(migrations.__file__).parent
#: Advisory lock key of schema migrations (study locks use the study id, a positive int32).
MIGRATION_LOCK = -0x6B626B62


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    return config


def head() -> str:
    return str(ScriptDirectory.from_config(alembic_config()).get_current_head())


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


class SchemaError(RuntimeError):
    """The database's schema is not one this code can run on (said in one line, with what to
    do)."""


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Bring the database up to ``revision`` (what `bbkb migrate` runs); returns the revision
    it was at, read under the migration lock (None: empty)."""
    return _migrate(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> str | None:
    """Take the database down to ``revision``: rows are kept, values of the columns added after
    it are lost (tests/service/test_migrations.py goes down to the first revision and back)."""
    return _migrate(engine, command.downgrade, revision)


def _migrate(engine: Engine, step, revision: str) -> str | None:  # type: ignore[no-untyped-def]
    """Run an Alembic command on one :func:`migration_connection`; the revision before it."""
    config = alembic_config()
    with migration_connection(engine) as conn:
        before = MigrationContext.configure(conn).get_current_revision()
        _check_known(before)
        config.attributes["connection"] = conn
        step(config, revision)
    return before


def _check_known(revision: str | None) -> None:
    """SchemaError for a revision this code's migrations do not have: a newer code's (a
    rollback to an older image after the newer one migrated), which Alembic reports with a
    traceback ("Can't locate revision")."""
    if revision is None:
        return
    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    except Exception:  # noqa: BLE001 - alembic's CommandError / ResolutionError
        raise SchemaError(
            f"database schema is at {revision!r}, which this code does not know (its newest is "
            f"{head()!r}): a newer version of bbkb-service migrated it. Run that version, or "
            f"downgrade the database with it first (`alembic downgrade {head()}` from its "
            "migrations)") from None


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """The connection a migration runs on, in a transaction (``bbkb migrate``, and Alembic's
    own command line through migrations/env.py).

    On SQLite, foreign keys are switched off for the migration: Alembic's batch mode rebuilds a
    table by copying it and dropping the original, and with foreign keys on, dropping
    ``studies`` would cascade to every trial. The pragma only works outside a transaction.
    On PostgreSQL, an advisory lock makes processes that start together (uvicorn workers, api
    replicas) migrate one at a time: the later ones then find the schema current (SQLite's
    ``BEGIN IMMEDIATE`` does the same).
    """
    with engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
                yield conn
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")


def ensure_schema(engine: Engine, *, auto_upgrade: bool = True) -> None:
    """Upgrade (embedded default) or fail with the command to run (production); SchemaError
    either way for a schema newer than this code."""
    revision = current(engine)
    if revision == head():
        return
    _check_known(revision)
    if auto_upgrade:
        upgrade(engine)
        return
    raise SchemaError(f"database schema is at {revision!r}, this code needs {head()!r}: run "
                      "`bbkb migrate` (alembic upgrade head) first")
