"""`bbkb keys list` and `bbkb keys revoke`: a leaked key is named by its first characters and
refused by a running server from its next request on, while the owner's other keys still work."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from client import AuthenticationError, Client, PermissionDeniedError
from service.api.app import create_app
from service.auth import SCOPES, SHOWN, _digest
from service.cli import SCOPE_OPTION, main
from service.settings import Settings
from service.store.database import make_engine, session_factory, transaction
from service.store.models import ApiKey


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'bbkb.db'}"
    monkeypatch.setenv("BBKB_DATABASE_URL", url)
    return url


def _create(owner: str, capsys: pytest.CaptureFixture[str], *options: str) -> str:
    assert main(["keys", "create", "--owner", owner, *options]) == 0
    return capsys.readouterr().out.strip()


def _listed(capsys: pytest.CaptureFixture[str], *options: str) -> list[list[str]]:
    assert main(["keys", "list", *options]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["KEY", "OWNER", "SCOPE", "CREATED", "REVOKED"]
    return [row.split() for row in rows]


def test_list_names_keys_by_their_first_characters_only(database, capsys):
    lab = _create("lab", capsys)
    other = _create("other", capsys)
    rows = _listed(capsys)
    assert [row[0] for row in rows] == [lab[:SHOWN] + "...", other[:SHOWN] + "..."]
    assert [row[1] for row in rows] == ["lab", "other"] and [row[-1] for row in rows] == ["-"] * 2
    assert [row[1] for row in _listed(capsys, "--owner", "other")] == ["other"]
    assert _listed(capsys, "--owner", "nobody") == []


def test_a_worker_key_reads_and_reports_but_creates_nothing(database, tmp_path, capsys):
    """`keys create --scope worker`: the key a cluster's workers hold. Through the SDK it finds
    its owner's study, asks for and completes a trial; creating, pausing or deleting is a
    PermissionDeniedError naming the owner key it needs."""
    owner = _create("lab", capsys)
    worker = _create("lab", capsys, "--scope", "worker")
    assert [row[2] for row in _listed(capsys)] == ["owner", "worker"]
    app = create_app(Settings(database_url=database, auth="keys", data_dir=tmp_path))
    with TestClient(app, base_url="http://testserver") as http:
        Client(http=http, api_key=owner).create_study("s", candidates=[[0.0], [1.0], [2.0]],
                                                      engine={"mode": "async"})
        account = Client(http=http, api_key=worker).account()  # a worker checks its key
        assert (account.owner, account.scope) == ("lab", "worker")
        study = Client(http=http, api_key=worker).study("s")
        (trial,) = study.ask("w").trials
        assert study.tell(trial.id, 1.5, worker_id="w").status == "completed"
        for refused in (lambda: Client(http=http, api_key=worker).create_study(
                            "t", candidates=[[0.0], [1.0]]),
                        study.pause, study.delete):
            with pytest.raises(PermissionDeniedError, match="needs an owner key") as raised:
                refused()
            assert raised.value.status_code == 403 and raised.value.field == "authorization"
        assert [s.name for s in Client(http=http, api_key=owner).studies()] == ["s"]
    assert SCOPE_OPTION["choices"] == SCOPES  # the CLI's copy (its --help imports no SQL)
    with pytest.raises(SystemExit):  # argparse: an unknown scope
        main(["keys", "create", "--owner", "lab", "--scope", "admin"])
    assert "invalid choice: 'admin'" in capsys.readouterr().err


def test_a_revoked_key_is_refused_by_a_running_server(database, tmp_path, capsys):
    leaked, kept = _create("lab", capsys), _create("lab", capsys)
    app = create_app(Settings(database_url=database, auth="keys", data_dir=tmp_path))
    with TestClient(app, base_url="http://testserver") as http:
        Client(http=http, api_key=leaked).create_study("s", candidates=[[0.0], [1.0]])
        assert main(["keys", "revoke", leaked[:SHOWN]]) == 0
        assert "revoked: " + leaked[:SHOWN] in capsys.readouterr().err
        with pytest.raises(AuthenticationError, match="revoked"):
            Client(http=http, api_key=leaked).studies()
        assert [s.name for s in Client(http=http, api_key=kept).studies()] == ["s"]

        assert main(["keys", "revoke", kept]) == 0  # the whole key works too
        with pytest.raises(AuthenticationError):
            Client(http=http, api_key=kept).studies()
    assert main(["keys", "revoke", kept]) == 0  # again: nothing changes, and it says so
    assert "already revoked: " in capsys.readouterr().err
    assert all(row[-2] != "-" for row in _listed(capsys))  # both have a revocation time


@pytest.mark.parametrize("given, message", [
    ("bbkb_", "first 12 characters"),
    ("bbkb_missing", "no API key starts with 'bbkb_missing'"),
    ("bbkb_missing-and-longer-than-a-prefix", "no API key is 'bbkb_missing'..."),
])
def test_revoke_refuses_what_names_no_key(database, capsys, given, message):
    _create("lab", capsys)
    with pytest.raises(SystemExit, match=message.replace(".", r"\.")):
        main(["keys", "revoke", given])
    assert _listed(capsys)[0][-1] == "-"


def test_revoke_refuses_a_prefix_that_names_two_keys(database, capsys):
    key = _create("lab", capsys)
    engine = make_engine(database)
    try:  # a second key with the same first characters (42 random bits: rare, not impossible)
        with transaction(session_factory(engine)) as session:
            session.add(ApiKey(owner_id=1, prefix=key[:SHOWN], digest=_digest(key + "x")))
    finally:
        engine.dispose()
    with pytest.raises(SystemExit, match="2 keys start with .*: give the whole key"):
        main(["keys", "revoke", key[:SHOWN]])
    assert main(["keys", "revoke", key]) == 0
    assert [row[-1] == "-" for row in _listed(capsys)] == [False, True]


def test_keys_and_migrate_take_the_servers_data_dir(tmp_path, monkeypatch, capsys):
    """`--data-dir` names the database `bbkb serve --data-dir` uses: run from another directory
    without it, `keys create` made a new empty database and printed a key the server
    refused."""
    for name in ("BBKB_DATABASE_URL", "BBKB_DATA_DIR"):  # set first: restored afterwards, as
        monkeypatch.setenv(name, "")  # the command sets BBKB_DATA_DIR in this process
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "served"
    assert main(["keys", "create", "--owner", "lab", "--data-dir", str(data)]) == 0
    key = capsys.readouterr().out.strip()
    assert not (tmp_path / "bbkb-data").exists()
    assert main(["migrate", "--data-dir", str(data)]) == 0
    assert "already current" in capsys.readouterr().out  # keys create made it
    app = create_app(Settings(data_dir=data))
    with TestClient(app) as http:
        assert http.get("/v1/studies", headers={"Authorization": f"Bearer {key}"}
                        ).status_code == 200
    app.state.sessions.kw["bind"].dispose()
