"""``bbkb bench``: the engine's strategies timed on a shipped problem, no server."""

from __future__ import annotations

import json

from service.cli import main


def test_bench_runs_each_strategy_and_bbkb_beats_uniform(capsys):
    code = main(["bench", "--T", "300", "--strategies", "bbkb", "uniform", "--json", "-q"])
    out, _ = capsys.readouterr()
    assert code == 0
    report = json.loads(out)
    assert (report["problem"], report["candidates"], report["dim"]) == ("abalone", 4177, 10)
    runs = {run["strategy"]: run for run in report["runs"]}
    assert set(runs) == {"bbkb", "uniform"} and all(r["steps"] == 300 for r in runs.values())
    assert runs["bbkb"]["regret_ratio"] < 0.5 < runs["uniform"]["regret_ratio"] < 1.5
    assert runs["bbkb"]["batches"] >= 3 and runs["bbkb"]["dictionary"] >= 1
    assert runs["uniform"]["dictionary"] == 0
    assert all(r["seconds"] > 0 and r["steps_per_second"] > 0 for r in runs.values())


def test_bench_prints_a_table_for_a_test_function_and_names_a_bad_one(capsys):
    code = main(["bench", "--problem", "branin", "--candidates", "300", "--T", "60",
                 "--strategies", "uniform", "--seeds", "2", "-q"])
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("branin_d2: 300 candidates x 2, T = 60, 2 seed(s)")
    assert lines[1].split()[:3] == ["strategy", "engine", "s"]
    assert lines[2].split()[0] == "uniform" and len(lines) == 3
    code = main(["bench", "--problem", "nope", "-q"])
    _, err = capsys.readouterr()
    assert code == 2 and "unknown test function 'nope'" in err
