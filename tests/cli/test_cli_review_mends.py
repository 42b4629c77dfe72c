"""Review mends of the ``bbkb`` command and the SDK's messages, against real servers: ``export
-o -`` writes to stdout, a missing or refused API key names ``--api-key`` / ``BBKB_API_KEY``,
the SDK explains a url ending in /v1, and ``keys create`` says which database it wrote to and
refuses to make a new one where nothing names it."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from client import AuthenticationError, Client, NotFoundError
from service.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_database_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No BBKB_DATABASE_URL or BBKB_DATA_DIR (restored afterwards: --data-dir sets the latter
    in this process), run from an empty directory."""
    for name in ("BBKB_DATABASE_URL", "BBKB_DATA_DIR"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


# -- export -o - --------------------------------------------------------------------------------

def test_export_to_a_dash_writes_stdout_not_a_file(server_factory, tmp_path, capsys,
                                                   monkeypatch):
    """It wrote a file named '-' in the current directory and printed 'wrote -'."""
    server = server_factory({"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"})
    with Client(server.url) as sdk:
        study = sdk.create_study("demo", candidates=[[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]])
        trial = study.ask("w").trials[0]
        study.tell(trial.id, 0.25, worker_id="w")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "study", "export", "demo", "-o", "-", "--url", server.url)
    assert code == 0 and err == "", err
    assert not (tmp_path / "-").exists()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["trial_id"], float(r["value"])) for r in rows] == [(str(trial.id), 0.25)], out

    code, out, err = run(capsys, "study", "export", "demo", "-o", "-", "--json",
                         "--url", server.url)
    assert code == 1 and out == "" and "give -o FILE with --json" in err, err


# -- API keys: the CLI's hint and the SDK's ---------------------------------------------------

def test_a_missing_or_refused_key_says_how_to_give_one(server_factory, tmp_path, capsys,
                                                       monkeypatch):
    """It printed only "error: missing 'Authorization: Bearer <api key>' header (field
    authorization)"."""
    server = server_factory({"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "keys"})
    for name in ("BBKB_API_KEY", "BBKB_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    code, _, err = run(capsys, "study", "list", "--url", server.url)
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("error: missing 'Authorization: Bearer <api key>' header (this "
                          "server needs an API key: give --api-key KEY or set BBKB_API_KEY"), err

    code, _, err = run(capsys, "queue", "--url", server.url, "--api-key", "bbkb_wrong")
    assert code == 1 and "unknown or revoked API key (the key of --api-key;" in err, err
    monkeypatch.setenv("BBKB_API_KEY", "bbkb_wrong")
    code, _, err = run(capsys, "study", "list", "--url", server.url)
    assert code == 1 and "(the key of BBKB_API_KEY;" in err, err

    monkeypatch.delenv("BBKB_API_KEY")
    with Client(server.url) as sdk, pytest.raises(AuthenticationError) as refused:
        sdk.studies()
    assert "Client(api_key=...), or set BBKB_API_KEY" in str(refused.value)
    assert refused.value.detail == "missing 'Authorization: Bearer <api key>' header"
    with Client(server.url, api_key="bbkb_wrong") as sdk, \
            pytest.raises(AuthenticationError) as refused:
        sdk.studies()
    assert refused.value.hint is None  # the key was given: the server's detail says it all


def test_the_sdk_explains_a_url_ending_in_v1(server_factory, tmp_path):
    """``Client("http://host:port/v1")`` raised a bare '404: Not Found' (the CLI had a hint)."""
    server = server_factory({"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"})
    with Client(server.url + "/v1") as sdk, pytest.raises(NotFoundError) as missing:
        sdk.studies()
    message = str(missing.value)
    assert message.startswith(f"404: Not Found; no API route GET {server.url}/v1/v1/studies: "
                              "the url (or BBKB_URL) is the server's address without /v1, "
                              f"e.g. Client({server.url!r})"), message
    with Client(server.url + "/api") as sdk, pytest.raises(NotFoundError) as missing:
        sdk.studies()
    assert f"is {server.url}/api a bbkb server's address" in str(missing.value)
    with Client(server.url) as sdk, pytest.raises(NotFoundError) as missing:
        sdk.study(12345)  # a missing study: the server's own answer, no hint
    assert missing.value.hint is None and str(missing.value) == (
        "404: study 12345 not found (field: study_id)")


# -- keys create and its database ---------------------------------------------------------------

def test_keys_create_refuses_to_make_a_database_nothing_names(no_database_settings, capsys):
    """Run in the wrong directory, it made ./bbkb-data/bbkb.db and printed a key the running
    server refused, saying nothing of where it went."""
    database = no_database_settings / "bbkb-data" / "bbkb.db"
    for command in (["create"], ["ensure", "--file", "key"], ["list"], ["revoke", "bbkb_x" * 3]):
        with pytest.raises(SystemExit) as refused:
            main(["keys", *command, *(["--owner", "lab"] if command[0] in ("create", "ensure")
                                      else [])])
        message = str(refused.value.code)
        assert message.startswith(f"bbkb keys {command[0]}: no database at {database}: run it "
                                  "where the server runs"), message
        assert ("--create makes a new database here" in message) == (
            command[0] in ("create", "ensure")), message
    assert not (no_database_settings / "bbkb-data").exists()
    assert not (no_database_settings / "key").exists()

    code, key, err = run(capsys, "keys", "create", "--owner", "lab", "--create")
    assert code == 0 and key.startswith("bbkb_") and database.exists()
    assert f"in the new database {database}: shown once" in err, err
    code, _, err = run(capsys, "keys", "create", "--owner", "lab")  # it exists now
    assert code == 0 and f"in the database {database}: shown once" in err, err
    assert run(capsys, "keys", "list")[1].count("lab") == 2


def test_keys_create_makes_the_database_a_setting_names(no_database_settings, capsys,
                                                        monkeypatch):
    """--data-dir, BBKB_DATA_DIR and BBKB_DATABASE_URL name the database: it is created (the
    documented way to give a key before the server's first start)."""
    given = no_database_settings / "given"
    code, _, err = run(capsys, "keys", "create", "--owner", "lab", "--data-dir", str(given))
    assert code == 0 and f"in the new database {given / 'bbkb.db'}" in err, err
    monkeypatch.delenv("BBKB_DATA_DIR")
    url = no_database_settings / "url.db"
    monkeypatch.setenv("BBKB_DATABASE_URL", f"sqlite:///{url}")
    code, _, err = run(capsys, "keys", "ensure", "--owner", "lab", "--file", "key")
    assert code == 0 and err == (f"API key of owner 'lab' (scope owner) in key: created "
                                 f"(database {url})\n")
