"""``bbkb study create | list | show | best | export | ask | results`` against a real server
process."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from client import Client
from service.cli import main
from service.study_cli import CELL_WIDTH, _kernel_line, _table


@pytest.fixture
def server(server_factory, tmp_path):
    return server_factory({"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
                           "BBKB_AUTH": "none", "BBKB_DATA_DIR": str(tmp_path)})


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_from_csv_list_show_best_export(server, tmp_path, capsys):
    rng = np.random.default_rng(0)
    matrix = rng.random((40, 2))
    path = tmp_path / "candidates.csv"
    np.savetxt(path, matrix, delimiter=",", header="alpha,beta", comments="")
    url = ["--url", server.url]
    code, out, _ = run(capsys, "study", "create", "cli-study", "--candidates", str(path),
                       "-e", "strategy=bbkb", "-e", "seed=4", "-e", "mode=async",
                       "-e", 'kernel={"name": "rbf", "lengthscale": 0.3}', "--json", *url)
    assert code == 0
    created = json.loads(out)
    assert (created["n_candidates"], created["dim"]) == (40, 2)
    assert created["parameter_names"] == ["alpha", "beta"]
    assert (created["strategy"], created["mode"]) == ("bbkb", "async")

    code, _, err = run(capsys, "study", "best", "cli-study", *url)
    assert code == 1 and "no completed trial" in err

    values = {}
    with Client(server.url) as client:
        study = client.study(created["id"])
        for trial in study.ask("w", count=3).trials:
            values[trial.id] = float(matrix[trial.candidate].sum())
            study.tell(trial.id, values[trial.id])

    code, out, _ = run(capsys, "study", "list", *url)
    assert code == 0
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["id", "name", "strategy", "status"]
    assert row.split()[:5] == [str(created["id"]), "cli-study", "bbkb", "active", "3"]

    code, out, _ = run(capsys, "study", "show", str(created["id"]), *url)
    assert code == 0 and "trials       3 completed=3" in out and "alpha, beta" in out
    assert "kernel       lengthscale 0.3 (fixed), lam 1\n" in out  # the study's own

    code, out, _ = run(capsys, "study", "best", "cli-study", "--json", *url)
    best = json.loads(out)
    assert best["value"] == pytest.approx(max(values.values()))
    assert best["parameters"]["alpha"] == pytest.approx(matrix[best["candidate"], 0])

    target = tmp_path / "out.csv"
    code, _, err = run(capsys, "study", "export", "cli-study", "-o", str(target), *url)
    assert code == 0 and str(target) in err
    with target.open() as handle:
        exported = list(csv.DictReader(handle))
    assert {int(r["trial_id"]): float(r["value"]) for r in exported} == pytest.approx(values)


def test_search_space_and_errors_are_one_line_not_tracebacks(server, tmp_path, capsys):
    url = ["--url", server.url]
    space = json.dumps([{"name": "lr", "low": 1e-4, "high": 0.1, "log": True},
                        {"name": "layers", "type": "int", "low": 1, "high": 4}])
    code, out, _ = run(capsys, "study", "create", "space", "--search-space", space,
                       "--n-candidates", "64", *url)
    assert code == 0 and "64 candidates x 2" in out

    code, _, err = run(capsys, "study", "create", "bad", "--search-space", space,
                       "--n-candidates", "64", "-e", "strategy=nonsense", *url)
    assert code == 1 and err.startswith("error: ") and "strategy" in err

    code, _, err = run(capsys, "study", "show", "no-such-study", *url)
    assert code == 1 and "no study named 'no-such-study'" in err

    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3\n")
    with pytest.raises(SystemExit, match="cannot read candidates"):
        main(["study", "create", "x", "--candidates", str(bad), *url])


def test_wait_without_a_dispatch_prints_only_its_line(server, capsys):
    """The audit: before the "no dispatch" line, an empty progress bar ("evaluations: 0eval
    [00:00, ?eval/s]") was drawn on stderr."""
    url = ["--url", server.url]
    space = json.dumps([{"name": "x", "low": 0, "high": 1}])
    assert run(capsys, "study", "create", "idle", "--search-space", space,
               "--n-candidates", "8", *url)[0] == 0
    code, out, err = run(capsys, "study", "wait", "idle", *url)
    assert (code, err) == (0, ""), err
    assert out.strip().endswith(": no dispatch; the study has 0 completed and 0 failed trials")


def test_unreachable_server_exits_2(capsys):
    code, _, err = run(capsys, "study", "list", "--url", "http://127.0.0.1:9")
    assert code == 2 and err.startswith("error: ")


def test_the_kernel_line_of_show_says_where_the_lengthscales_come_from():
    """One lengthscale, up to 8 listed, or their range; the source with the last refit (none
    for a fixed kernel or a state stored before sources were recorded); lam."""
    fit = {"lengthscale": [2.4871], "lam": 0.05, "source": "fit", "fitted_at": 68}
    assert _kernel_line(fit) == "lengthscale 2.487 (fit, last refit at 68 observations), lam 0.05"
    ard = fit | {"lengthscale": [0.512, 30.0, 7.25], "source": "floor"}
    assert _kernel_line(ard).startswith("lengthscales 0.512, 30, 7.25 (floor, last refit at 68")
    many = fit | {"lengthscale": [float(v) for v in range(1, 13)]}
    assert _kernel_line(many).startswith("12 lengthscales, 1 to 12 (fit,")
    assert _kernel_line({"lengthscale": [4.0], "lam": 1.0, "source": "start", "fitted_at": 0}) \
        == "lengthscale 4 (start), lam 1"
    assert _kernel_line({"lengthscale": [4.0], "lam": 1.0, "source": None, "fitted_at": 9}) \
        == "lengthscale 4, lam 1"


def test_a_long_cell_is_cut_so_that_the_table_stays_readable(capsys):
    """One 200-character study name made every row of `bbkb study list` 250 characters wide."""
    long = "a-very-long-study-name-" * 9
    _table([("id", "name", "status"), ("1", long, "running"), ("2", "short", "paused")])
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) == len("id") + 2 + CELL_WIDTH + 2 + len("running")
    assert lines[1].split()[1] == long[: CELL_WIDTH - 3] + "..."
    assert lines[2].split() == ["2", "short", "paused"]
    assert lines[0].index("status") == lines[1].index("running") == lines[2].index("paused")


def test_a_lab_asks_for_a_sheet_fills_it_in_and_uploads_it(server, tmp_path, capsys):
    matrix = np.random.default_rng(1).random((30, 2))
    path = tmp_path / "candidates.csv"
    np.savetxt(path, matrix, delimiter=",", header="temp,ph", comments="")
    url = ["--url", server.url]
    assert run(capsys, "study", "create", "lab", "--candidates", str(path), "-e", "seed=2",
               *url)[0] == 0
    sheet = tmp_path / "sheet.csv"
    code, out, err = run(capsys, "study", "ask", "lab", "-n", "3", "-o", str(sheet), *url)
    assert code == 0 and out == "" and f"bbkb study results lab {sheet}" in err
    rows = list(csv.DictReader(sheet.open(newline="")))
    assert list(rows[0])[:2] == ["trial_id", "value"] and list(rows[0])[-2:] == ["temp", "ph"]
    assert all(row["value"] == "" for row in rows)
    for row in rows:  # the parameters are the candidate's
        np.testing.assert_array_equal([float(row["temp"]), float(row["ph"])],
                                      matrix[int(row["candidate"])])
    measured = rows[:-1]
    for row in measured:
        row["value"] = repr(float(row["temp"]) - float(row["ph"]))
    with sheet.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    code, out, _ = run(capsys, "study", "results", "lab", str(sheet), *url)
    assert code == 0
    assert out.strip().endswith(f"{len(measured)} completed, 0 failed, 0 unchanged, "
                                f"{len(rows) - len(measured)} without a value (skipped)")
    code, out, _ = run(capsys, "study", "results", "lab", str(sheet), "--json", *url)
    assert json.loads(out) == {"completed": 0, "failed": 0, "unchanged": len(measured),
                               "skipped": len(rows) - len(measured)}
    with Client(server.url) as client:
        trials = {t.id: t for t in client.study("lab").trials()}
    for row in rows:
        trial = trials[int(row["trial_id"])]
        assert trial.value == (float(row["value"]) if row["value"] else None)
    # the same worker asking again first gets back its trial still running
    code, out, _ = run(capsys, "study", "ask", "lab", "--json", *url)
    assert code == 0 and [t["id"] for t in json.loads(out)] == [int(rows[-1]["trial_id"])]
    rows[0]["value"] = "12.5"  # a different value for a completed trial: nothing applied
    with sheet.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    code, _, err = run(capsys, "study", "results", "lab", str(sheet), *url)
    assert code == 1 and "already has the value" in err
    assert "CSV line 2" in err and "body.line2.value" in err


def test_ask_exits_1_when_a_sync_batch_waits_for_its_results(server, capsys):
    url = ["--url", server.url]
    assert run(capsys, "study", "create", "sync", "--search-space",
               '[{"name": "x", "low": 0, "high": 1}]', "--n-candidates", "20", "-e",
               "mode=sync", *url)[0] == 0
    code, out, _ = run(capsys, "study", "ask", "sync", *url)
    assert code == 0 and out.startswith("trial_id,value,")
    code, out, err = run(capsys, "study", "ask", "sync", "--worker-id", "other", *url)
    assert (code, out) == (1, "") and "waiting for 1 pending result" in err


def test_a_name_of_other_scripts_digits_is_a_name_not_an_id(server, tmp_path, capsys):
    """int() reads "٢" (Arabic-Indic two) as 2: `bbkb study delete ٢` deleted study 2."""
    url = ["--url", server.url]
    space = '[{"name": "x", "low": 0, "high": 1}]'
    for name in ("first", "keepme", "\u0662", "\u00b3"):  # ids 1, 2, 3, 4
        assert run(capsys, "study", "create", name, "--search-space", space,
                   "--n-candidates", "5", *url)[0] == 0
    for name, study_id in (("\u0662", 3), ("\u00b3", 4), ("2", 2)):
        code, out, err = run(capsys, "study", "show", name, "--json", *url)
        assert code == 0, err
        assert (json.loads(out)["id"], json.loads(out)["name"]) == (
            study_id, name if study_id != 2 else "keepme")
    assert run(capsys, "study", "delete", "\u0662", "--yes", *url)[0] == 0
    with Client(server.url) as client:
        assert sorted(s.name for s in client.studies()) == sorted(["first", "keepme", "\u00b3"])
