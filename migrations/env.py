"""Alembic environment: the app's metadata, the URL from the settings (or a given connection)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.settings import Settings
from service.store.database import make_engine
from service.store.migrate import migration_connection
from service.store.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      compare_type=True, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or str(Settings().database_url)
    engine = make_engine(url)
    try:  # SQLite's foreign keys off: a batch rebuild of studies would empty every other table
        with migration_connection(engine) as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():  # `alembic ... upgrade head --sql`: the SQL, not run
    context.configure(url=config.get_main_option("sqlalchemy.url")
                      or str(Settings().database_url),
                      target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
