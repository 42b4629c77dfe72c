"""``bbkb study ask`` says when its sheet holds one candidate on several rows (a lab would
otherwise measure the same conditions twice in a round without knowing why)."""

from __future__ import annotations

import csv
import json

import pytest

from service.cli import main


@pytest.fixture
def server(server_factory, tmp_path):
    return server_factory({"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
                           "BBKB_AUTH": "none", "BBKB_DATA_DIR": str(tmp_path)})


def _ask_sheet(capsys, server, tmp_path, name: str, *engine: str) -> tuple[list[dict], str]:
    url = ["--url", server.url]
    assert main(["study", "create", name, "--search-space",
                 '[{"name": "x", "low": 0, "high": 1}]', "--n-candidates", "6",
                 "-e", "mode=async", *engine, *url]) == 0
    sheet = tmp_path / f"{name}.csv"
    capsys.readouterr()
    assert main(["study", "ask", name, "-n", "12", "-o", str(sheet), *url]) == 0
    return list(csv.DictReader(sheet.open(newline=""))), capsys.readouterr().err


def test_a_sheet_says_how_many_rows_repeat_a_candidate(server, tmp_path, capsys):
    rows, err = _ask_sheet(capsys, server, tmp_path, "replicates")
    repeats = len(rows) - len({row["candidate"] for row in rows})
    assert len(rows) == 12 and repeats >= 6  # 12 rows, 6 candidates
    assert f"note: {repeats} row(s) repeat another row's candidate" in err
    assert "deterministic=true" in err
    rows, err = _ask_sheet(capsys, server, tmp_path, "once", "-e", "deterministic=true")
    assert len({row["candidate"] for row in rows}) == len(rows) == 6
    assert "repeat" not in err


def test_a_sheet_to_dash_goes_to_stdout(server, tmp_path, capsys, monkeypatch):
    """``-o -`` wrote a file named "-" (as study export's did)."""
    monkeypatch.chdir(tmp_path)
    url = ["--url", server.url]
    assert main(["study", "create", "dash", "--search-space",
                 '[{"name": "x", "low": 0, "high": 1}]', "--n-candidates", "6", *url]) == 0
    capsys.readouterr()
    assert main(["study", "ask", "dash", "-o", "-", *url]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("trial_id,value,") and "SHEET.csv" in err
    assert not (tmp_path / "-").exists()


def test_ask_json_says_on_stderr_why_fewer_trials_came(server, capsys):
    """``--json`` printed only the trials: a partial answer (a sync batch closed after its
    first trial, or an ask out of time) went unnoticed."""
    url = ["--url", server.url]
    assert main(["study", "create", "sync", "--search-space",
                 '[{"name": "x", "low": 0, "high": 1}]', "--n-candidates", "6",
                 "-e", "mode=sync", *url]) == 0
    capsys.readouterr()
    assert main(["study", "ask", "sync", "-n", "5", "--json", *url]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 1 and "note: batch 0 is complete" in err
