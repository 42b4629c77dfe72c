"""``bbkb study``: invalid input is one ``error: ...`` line (never a traceback), CSV headers are
parsed as CSV, and an all-digit study name can be used. Against a real server process."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from client import Client
from service.cli import main


@pytest.fixture
def server(server_factory, tmp_path):
    return server_factory({"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
                           "BBKB_AUTH": "none", "BBKB_DATA_DIR": str(tmp_path)})


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """``bbkb`` with argv: (exit code, stdout, stderr); a SystemExit counts as an exit."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
        if isinstance(exit_.code, str):
            print(exit_.code, file=__import__("sys").stderr)
    out, err = capsys.readouterr()
    return code, out, err


def _files(tmp: Path) -> None:
    np.savetxt(tmp / "ok.csv", np.random.default_rng(0).random((5, 2)), delimiter=",",
               header="a,b", comments="")
    (tmp / "empty.csv").write_text("")
    (tmp / "header-only.csv").write_text("a,b\n")
    (tmp / "nan.csv").write_text("a,b\n1,2\n3,nan\n")
    (tmp / "text.csv").write_text("a,b\n1,2\n3,x\n")  # row 2 like nan.csv (numpy: "row 1")
    (tmp / "inf.csv").write_text("1,2\ninf,3\n")
    (tmp / "dup.csv").write_text("a,b,a\n1,2,3\n")
    np.save(tmp / "cube.npy", np.zeros((2, 2, 2)))
    np.save(tmp / "text.npy", np.array([["a", "b"]]))
    np.save(tmp / "complex.npy", np.ones((2, 2), complex))
    np.save(tmp / "vector.npy", np.ones(3))
    np.save(tmp / "nan.npy", np.array([[1.0, np.inf]]))
    (tmp / "csv.npy").write_text("1,2\n3,4\n")  # a CSV renamed: was "pickled data" to numpy


CASES: list[tuple[list[str], str]] = [
    (["", "--candidates", "ok.csv"], "error: name: "),
    (["n" * 201, "--candidates", "ok.csv"], "error: name: String should have at most 200"),
    (["s", "--candidates", "ok.csv", "--max-attempts", "0"], "error: max_attempts: "),
    (["s", "--candidates", "ok.csv", "--lease-seconds", "-1"], "error: lease_seconds: "),
    (["s", "--candidates", "ok.csv", "-e", "lam=NaN"], "error: engine.lam: must be a finite"),
    (["s", "--search-space", '[{"name": "x", "low": 0, "high": 1}]'], "needs n_candidates"),
    (["s", "--search-space", "[]", "--n-candidates", "5"], "error: search_space: "),
    (["s", "--search-space", '[{"name": "x", "low": 2, "high": 1}]', "--n-candidates", "5"],
     "needs low < high"),
    (["s", "--candidates", "empty.csv"], "the file is empty"),
    (["s", "--candidates", "header-only.csv"], "no candidates: the matrix has no rows"),
    (["s", "--candidates", "nan.csv"], "row 2, column 2 ('b'): nan is not a finite number"),
    (["s", "--candidates", "inf.csv"], "row 2, column 1: inf is not a finite number"),
    (["s", "--candidates", "text.csv"], "row 2, column 2 ('b'): 'x' is not a number"),
    (["s", "--candidates", "dup.csv"], "column name 'a' appears twice (columns 1 and 3)"),
    (["s", "--candidates", "cube.npy"], "2-D matrix (rows x parameters), not an array of shape"),
    (["s", "--candidates", "vector.npy"], "not an array of shape (3,)"),
    (["s", "--candidates", "text.npy"], "must be real numbers"),
    (["s", "--candidates", "complex.npy"], "must be real numbers, not complex128"),
    (["s", "--candidates", "nan.npy"], "row 1, column 2: inf is not a finite number"),
    (["s", "--candidates", "csv.npy"], "csv.npy: not a .npy file (no NumPy header)"),
]


def test_invalid_create_arguments_are_one_error_line_and_create_nothing(
        server, tmp_path, capsys, monkeypatch):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    for args, expected in CASES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. numpy's "input contained no data"
            code, out, err = run(capsys, "study", "create", *args, "--url", server.url)
        assert code == 1 and not out, (args, err)
        assert err.startswith("error: ") and err.count("\n") == 1, (args, err)
        assert expected in err, (args, err)
    with Client(server.url) as client:
        assert client.studies() == []


def test_missing_search_space_file_is_a_usage_error(capsys, tmp_path):
    code, _, err = run(capsys, "study", "create", "s", "--search-space",
                       f"@{tmp_path / 'missing.json'}", "--n-candidates", "5")
    assert code == 2 and "cannot read" in err and "No such file" in err


def test_connection_settings_and_output_errors(server, tmp_path, capsys, monkeypatch):
    for url in ("localhost:8770", "ftp://x"):
        code, _, err = run(capsys, "study", "list", "--url", url)
        assert code == 1 and err == f"error: url must start with http:// or https://, " \
                                    f"got {url!r}\n"
    code, _, err = run(capsys, "study", "list", "--url", f"{server.url}/v1")
    assert code == 1 and err.startswith("error: Not Found (no such API route: give --url"), err
    monkeypatch.setenv("BBKB_API_KEY_FILE", str(tmp_path / "nonexistent"))
    code, _, err = run(capsys, "study", "list", "--url", server.url)
    assert code == 1 and err.startswith("error: BBKB_API_KEY_FILE=") and "cannot be read" in err
    monkeypatch.setenv("BBKB_API_KEY", "ключ")
    code, _, err = run(capsys, "study", "list", "--url", server.url)
    assert code == 1 and err == "error: the API key must be printable ASCII (an HTTP header " \
                                "value)\n"
    monkeypatch.delenv("BBKB_API_KEY")
    monkeypatch.delenv("BBKB_API_KEY_FILE")

    url = ["--url", server.url]
    space = json.dumps([{"name": "x", "low": 0, "high": 1}])
    assert run(capsys, "study", "create", "s", "--search-space", space, "--n-candidates", "4",
               *url)[0] == 0
    target = tmp_path / "nonexistent" / "x.csv"
    code, _, err = run(capsys, "study", "export", "s", "-o", str(target), *url)
    assert code == 1 and err == f"error: {target}: No such file or directory\n"


def test_csv_header_is_parsed_as_csv(server, tmp_path, capsys):
    path = tmp_path / "quoted.csv"
    path.write_text('"alpha", "be,ta"\n1,2\n3,4\n', encoding="utf-8-sig")  # with a BOM
    code, out, err = run(capsys, "study", "create", "q", "--candidates", str(path), "--json",
                         "--url", server.url)
    assert code == 0, err
    created = json.loads(out)
    assert created["parameter_names"] == ["alpha", "be,ta"] and created["n_candidates"] == 2


def test_an_all_digit_name_addresses_the_study_unless_an_id_matches(server, tmp_path, capsys):
    url = ["--url", server.url]
    space = json.dumps([{"name": "x", "low": 0, "high": 1}])
    ids = {}
    for name in ("777", "1"):
        code, out, _ = run(capsys, "study", "create", name, "--search-space", space,
                           "--n-candidates", "4", "--json", *url)
        assert code == 0
        ids[name] = json.loads(out)["id"]
    assert ids["777"] == 1  # so "1" is both an id and the other study's name

    code, out, err = run(capsys, "study", "show", "777", *url)
    assert code == 0 and out.startswith(f"study {ids['777']} '777'"), err
    code, out, _ = run(capsys, "study", "show", "1", *url)
    assert code == 0 and out.startswith("study 1 '777'")  # the id wins
    code, _, err = run(capsys, "study", "best", "777", *url)
    assert code == 1 and "no completed trial" in err
    code, _, err = run(capsys, "study", "show", "778", *url)
    assert code == 1 and err.startswith("error: no study with id or name '778'")
