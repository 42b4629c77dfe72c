"""Schema management: upgrade to the migrations' head, or refuse a stale schema with advice."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import migrations

SCRIPTS = Path(migrations.__file__).parent


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    return config


def head() -> str:
    return str(ScriptDirectory.from_config(alembic_config()).get_current_head())


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Bring the database to the head revision (what `bbkb migrate` runs)."""
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def ensure_schema(engine: Engine, *, auto_upgrade: bool = True) -> None:
    """Upgrade (embedded default) or fail with the command to run (production)."""
    if current(engine) == head():
        return
    if auto_upgrade:
        upgrade(engine)
        return
    raise RuntimeError(f"database schema is at {current(engine)!r}, this code needs {head()!r}:"
                       " run `bbkb migrate` (alembic upgrade head) first")
