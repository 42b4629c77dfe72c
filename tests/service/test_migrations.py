"""Alembic: an empty database upgrades to head and the models and migrations do not differ."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from service.store.database import make_engine
from service.store.migrate import current, ensure_schema, head, upgrade
from service.store.models import Base


def test_upgrade_empty_database_to_head_matches_the_models(database_url):
    engine = make_engine(database_url)
    upgrade(engine)
    assert current(engine) == head()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                Base.metadata)
    assert diff == []
    assert {"studies", "trials", "batches", "candidate_blocks", "api_keys", "owners"} <= set(
        inspect(engine).get_table_names())
    engine.dispose()


def test_a_stale_schema_is_refused_with_the_command_to_run(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    with pytest.raises(RuntimeError, match="bbkb migrate"):
        ensure_schema(engine, auto_upgrade=False)
    ensure_schema(engine, auto_upgrade=True)
    ensure_schema(engine, auto_upgrade=False)  # now at head: accepted
