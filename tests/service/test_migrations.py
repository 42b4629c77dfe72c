"""Alembic: an empty database upgrades to head, the models and migrations do not differ, and a
database holding studies goes down to the first revision and back up with its rows intact,
through `bbkb migrate`'s code or Alembic's own command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import Engine, inspect, select

from service.api.app import create_app
from service.settings import Settings
from service.store.database import make_engine
from service.store.migrate import alembic_config, current, downgrade, ensure_schema, head, upgrade
from service.store.models import Base

TABLES = ("owners", "studies", "candidate_blocks", "batches", "trials")


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


def _rows(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """Every row of the data tables, in key order, as {column: value}."""
    out = {}
    with engine.connect() as conn:
        for name in TABLES:
            table = Base.metadata.tables[name]
            out[name] = [dict(r._mapping) for r in conn.execute(
                select(table).order_by(*table.primary_key.columns))]
    return out


def _app(database_url: str, tmp_path: Path) -> TestClient:
    return TestClient(create_app(Settings(database_url=database_url, auth="none",
                                          data_dir=tmp_path, auto_migrate=False)))


def _alembic(database_url: str, *arguments: str) -> str:
    """Alembic's command line, as migrations/alembic.ini documents it; its output."""
    ini = Path(__file__).resolve().parents[2] / "migrations" / "alembic.ini"
    done = subprocess.run([sys.executable, "-m", "alembic", "-c", str(ini), *arguments],
                          env=os.environ | {"BBKB_DATABASE_URL": database_url},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_alembic_offline_mode_prints_the_migrations_sql(database_url):
    """`upgrade head --sql` failed: offline mode read only the ini's sqlalchemy.url."""
    sql = _alembic(database_url, "upgrade", "head", "--sql")
    assert "CREATE TABLE studies" in sql and f"'{head()}'" in sql


@pytest.mark.parametrize("via", ["bbkb", "alembic"])
def test_a_database_with_studies_goes_down_to_the_first_revision_and_back(database_url,
                                                                          tmp_path, via):
    """Through Alembic's command line, a downgrade on SQLite emptied trials, batches and
    candidate blocks: its batch mode drops and rebuilds studies, and env.py left foreign keys
    on (the cascade); it now migrates on bbkb's own connection (migrate.migration_connection).
    """
    step_down, step_up = (downgrade, upgrade) if via == "bbkb" else (
        lambda _, revision: _alembic(database_url, "downgrade", revision),
        lambda _: _alembic(database_url, "upgrade", "head"))
    engine = make_engine(database_url)
    upgrade(engine)
    candidates = np.random.default_rng(0).random((30, 2))
    with _app(database_url, tmp_path) as client:
        made = client.post("/v1/studies", json={"name": "kept", "candidates": candidates.tolist(),
                                                "engine": {"strategy": "bbkb", "seed": 0}})
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        asked = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": 6})
        trials = asked.json()["trials"]
        for trial in trials[:4]:  # four completed, two still running
            done = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                               json={"value": float(candidates[trial["candidate"]].sum())})
            assert done.status_code == 200, done.text
        own = client.post("/v1/studies", json={"name": "own-model", "candidates":
                                               candidates.tolist(),
                                               "engine": {"strategy": "gssbo", "seed": 0}})
        assert own.status_code == 201, own.text
    before = _rows(engine)
    assert len(before["trials"]) == 6 and before["batches"] and before["candidate_blocks"]

    first = ScriptDirectory.from_config(alembic_config()).get_base()
    step_down(engine, first)
    assert current(engine) == first
    kept = {name: {c["name"] for c in inspect(engine).get_columns(name)} for name in TABLES}
    step_up(engine)
    assert current(engine) == head()
    after = _rows(engine)
    # 0007's downgrade keeps each study's value scaling aside (older code refused the key)
    assert [s["spec"]["engine"]["normalize_values"] for s in after["studies"]] == ["unit"] * 2
    for name in TABLES:  # every row and value, but those of the columns the downgrade dropped
        later = set(Base.metadata.tables[name].columns.keys()) - kept[name]
        assert [{k: v for k, v in r.items() if k not in later} for r in after[name]] == \
            [{k: v for k, v in r.items() if k not in later} for r in before[name]], name
        assert all(r[c] is None for r in after[name] for c in later), name

    with _app(database_url, tmp_path) as client:  # the study carries on
        page = client.get(f"/v1/studies/{sid}/trials", params={"limit": 100}).json()["trials"]
        assert sorted(t["status"] for t in page) == ["completed"] * 4 + ["running"] * 2
        asked = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w2"})
        assert asked.status_code == 200, asked.text
        (trial,) = asked.json()["trials"]
        assert trial["t"] == 1 + max(t["t"] for t in page) and trial["status"] == "running"
        own_id = own.json()["id"]
        assert client.get(f"/v1/studies/{own_id}").status_code == 200
        asked = client.post(f"/v1/studies/{own_id}/suggestions", json={"worker_id": "w3"})
        assert asked.status_code == 200, asked.text
    engine.dispose()


def _specs(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [s for (s,) in conn.execute(select(Base.metadata.tables["studies"].c.spec)
                                           .order_by("id"))]


def test_0007_down_and_up_keeps_each_studys_value_scaling(database_url, tmp_path):
    """0007's downgrade removed normalize_values (older code refuses the key) and its upgrade
    pinned every study without it to "none", made before the revision or not: a study made
    with the default "unit" came back on the values as given. The downgrade now keeps the value
    in the spec, beside the engine config, and the upgrade puts it back; a study from before
    the revision (the key never set) is pinned as before."""
    engine = make_engine(database_url)
    upgrade(engine)
    candidates = np.random.default_rng(0).random((30, 2)).tolist()
    with _app(database_url, tmp_path) as client:
        for name, config in [("unit", {}), ("none", {"normalize_values": "none"}),
                             ("own", {"strategy": "gssbo"}), ("older", {}),
                             ("older-own", {"strategy": "gssbo"})]:
            made = client.post("/v1/studies", json={"name": name, "candidates": candidates,
                                                    "engine": {"seed": 0, **config}})
            assert made.status_code == 201, made.text
    before = _specs(engine)
    assert [s["engine"]["normalize_values"] for s in before] == ["unit", "none"] + ["unit"] * 3

    downgrade(engine, "0006")
    down = _specs(engine)
    assert all("normalize_values" not in s["engine"] for s in down)  # older code refuses it
    assert [s["downgraded_normalize_values"] for s in down] == ["unit", "none"] + ["unit"] * 3
    with engine.begin() as conn:  # the last two as older code made them: the key never set
        studies = Base.metadata.tables["studies"]
        for study_id, spec in conn.execute(select(studies.c.id, studies.c.spec)
                                           .where(studies.c.name.like("older%"))).all():
            conn.execute(studies.update().where(studies.c.id == study_id).values(
                spec={k: v for k, v in spec.items() if k != "downgraded_normalize_values"}))
    upgrade(engine)
    after = _specs(engine)
    assert after[:3] == before[:3]
    assert [s["engine"]["normalize_values"] for s in after[3:]] == ["none", "unit"]
    assert all("downgraded_normalize_values" not in s for s in after)
    engine.dispose()
