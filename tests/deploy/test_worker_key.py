"""Compose's worker key: `bbkb keys ensure` keeps one valid key of an owner in a 0600 file
(made once, kept on every rerun, replaced when the database does not know it for that owner),
and the SDK client (the workers') reads it from BBKB_API_KEY_FILE when BBKB_API_KEY is unset."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from client import AuthenticationError, Client
from service.api.app import create_app
from service.auth import authenticate
from service.cli import main
from service.errors import Unauthorized
from service.settings import Settings
from service.store.database import make_engine, session_factory, transaction
from service.store.models import ApiKey, Owner


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'bbkb.db'}"
    monkeypatch.setenv("BBKB_DATABASE_URL", url)
    monkeypatch.delenv("BBKB_API_KEY_FILE", raising=False)
    return url


@contextmanager
def _session(url: str) -> Iterator[Session]:
    """One transaction on its own engine, disposed (its connections closed) afterwards."""
    engine = make_engine(url)
    try:
        with transaction(session_factory(engine)) as session:
            yield session
    finally:
        engine.dispose()


def _owner_of(url: str, key: str) -> str | None:
    """The name of the key's owner, or None for a key the database refuses."""
    with _session(url) as session:
        try:
            owner_id = authenticate(session, f"Bearer {key}").owner
        except Unauthorized:
            return None
        return session.scalar(select(Owner.name).where(Owner.id == owner_id))


def _keys(url: str) -> int:
    with _session(url) as session:
        return int(session.scalar(select(func.count()).select_from(ApiKey)) or 0)


def test_ensure_makes_the_key_once_and_replaces_one_the_database_refuses(database, tmp_path):
    path = tmp_path / "keys" / "worker"
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path)]) == 0
    key = path.read_text().strip()
    assert path.stat().st_mode & 0o777 == 0o600 and _owner_of(database, key) == "lab"
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path)]) == 0  # a rerun
    assert path.read_text().strip() == key and _keys(database) == 1

    path.chmod(0o644)  # a widened file is narrowed again, its key kept
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path)]) == 0
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text().strip() == key

    with _session(database) as session:  # revoked
        session.execute(update(ApiKey).values(revoked_at=func.current_timestamp()))
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path)]) == 0
    renewed = path.read_text().strip()
    assert renewed != key and _owner_of(database, renewed) == "lab"

    assert main(["keys", "ensure", "--owner", "team", "--file", str(path)]) == 0  # other owner
    assert _owner_of(database, path.read_text().strip()) == "team" and _keys(database) == 3

    path.write_text("bbkb_not-a-key-of-this-database\n")  # e.g. the database was recreated
    assert main(["keys", "ensure", "--owner", "team", "--file", str(path)]) == 0
    assert _owner_of(database, path.read_text().strip()) == "team" and _keys(database) == 4


def test_ensure_replaces_an_owner_key_by_a_worker_key_and_names_the_old_one(database, tmp_path,
                                                                          capsys):
    """Compose's worker-key runs `keys ensure --scope worker`: a deployment from before scopes
    holds an owner key in the volume, which is replaced by a worker key on the next `up`. The
    old key is left valid (it may be in use elsewhere) and named with the command to revoke it.
    """
    path = tmp_path / "worker"
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path)]) == 0
    wide = path.read_text().strip()
    capsys.readouterr()
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path),
                 "--scope", "worker"]) == 0
    narrow = path.read_text().strip()
    said = capsys.readouterr().err
    assert narrow != wide and _scope_of(database, narrow) == "worker"
    assert "API key of owner 'lab' (scope worker)" in said and ": created" in said
    assert f"bbkb keys revoke {wide[:12]}" in said and _scope_of(database, wide) == "owner"
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path),
                 "--scope", "worker"]) == 0  # a rerun keeps it, and names nothing
    said = capsys.readouterr().err
    assert path.read_text().strip() == narrow and "kept" in said and "revoke" not in said


def _scope_of(url: str, key: str) -> str:
    with _session(url) as session:
        return authenticate(session, f"Bearer {key}").scope


def test_ensure_writes_to_BBKB_API_KEY_FILE_and_needs_a_file(database, tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="BBKB_API_KEY_FILE"):
        main(["keys", "ensure", "--owner", "lab"])
    monkeypatch.setenv("BBKB_API_KEY_FILE", str(tmp_path / "worker"))
    assert main(["keys", "ensure", "--owner", "lab"]) == 0
    assert _owner_of(database, (tmp_path / "worker").read_text().strip()) == "lab"


def test_the_sdk_client_sends_the_key_of_BBKB_API_KEY_FILE(database, tmp_path, monkeypatch):
    path = tmp_path / "worker"
    assert main(["keys", "ensure", "--owner", "lab", "--file", str(path)]) == 0
    app = create_app(Settings(database_url=database, auth="keys", data_dir=tmp_path))
    with TestClient(app, base_url="http://testserver") as http:
        monkeypatch.setenv("BBKB_API_KEY", "")  # compose's worker: empty unless set in .env
        with pytest.raises(AuthenticationError):
            Client(http=http).studies()
        monkeypatch.setenv("BBKB_API_KEY_FILE", str(path))
        assert Client(http=http).studies() == []
        monkeypatch.setenv("BBKB_API_KEY", "bbkb_wrong")  # a key given directly wins
        with pytest.raises(AuthenticationError):
            Client(http=http).studies()
        monkeypatch.delenv("BBKB_API_KEY")
        monkeypatch.setenv("BBKB_API_KEY_FILE", str(tmp_path / "missing"))
        with pytest.raises(ValueError, match="BBKB_API_KEY_FILE"):
            Client(http=http)
