"""benchmarks/hyperparameters.py --replot: the summary and the sweep figure from saved runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hyperparameters.py"


def _record(problem: str, config: str, ratios: list[float],
            lengthscales: list[list[float]]) -> dict[str, object]:
    runs = [{"ratio_mark": r, "ratio_T": r, "lengthscale": ls}
            for r, ls in zip(ratios, lengthscales, strict=True)]
    mean = sum(ratios) / len(ratios)
    return {"problem": problem, "config": config, "ratio_mark": mean, "ratio_T": mean,
            "cpu_seconds": 1.0, "fit_seconds": 0.1, "runs": runs}


def _save(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps({"args": {"T": "2000"}, "records": records}))
    return path


def test_replot_merges_saved_runs_into_the_summary_and_the_figure(tmp_path: Path) -> None:
    iso = [[2.0], [3.0]]
    first = _save(tmp_path / "a.json", [
        _record("toy", "auto", [0.1, 0.2], iso),
        _record("toy", "ls=2", [0.9, 0.9], iso),  # replaced by the second file's run
        _record("toy", "ls=4", [0.4, 0.4], iso)])
    second = _save(tmp_path / "b.json", [
        _record("toy", "ls=2", [0.2, 0.4], iso),
        _record("ard", "auto", [0.05, 0.05], [[1.0, 4.0], [2.0, 8.0]]),
        _record("ard", "ls=8", [0.1, 0.1], iso)])
    out = tmp_path / "plots"
    done = subprocess.run([sys.executable, str(SCRIPT), "--replot", str(first), str(second),
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()
            if line.startswith(("toy ", "ard "))}
    # auto 0.15 against the best fixed bandwidth, ls=2 at 0.3 once the later file's run wins
    assert rows["toy"][4] == "ls=2" and rows["toy"][6] == "-50.0%"
    assert rows["ard"][4] == "ls=8" and rows["ard"][6] == "-50.0%"
    figure = out / "sweep_T2000.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _intervals(*samples: list[float]) -> list[tuple[float, float, float]]:
    """benchmarks/hyperparameters.py's figure interval of each list of ratios, in one fresh
    process (the script pins BLAS threads before numpy loads)."""
    code = ("import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/..']; "
            "import hyperparameters as b; "
            "print(json.dumps([b._log_axis_interval([{'ratio_T': r} for r in ratios]) "
            "for ratios in json.loads(sys.argv[2])]))")
    done = subprocess.run([sys.executable, "-c", code, str(SCRIPT.parent), json.dumps(samples)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [tuple(interval) for interval in json.loads(done.stdout)]


def test_the_figure_interval_never_reaches_below_the_smallest_run() -> None:
    heavy, even, one = _intervals([0.01, 0.01, 1.0], [0.4, 0.5, 0.6, 0.5, 0.4, 0.6], [0.3])
    # heavy-tailed ratios on 3 seeds: the Student-t interval, 0.34 -/+ 1.42, reaches below zero,
    # which a log axis cannot draw; the bar stops at the smallest run instead
    mean, low, high = heavy
    assert mean == pytest.approx(0.34) and low == 0.01 and high > 1.0
    # where the Student-t end is above the smallest run, the interval is symmetric
    mean, low, high = even
    assert 0.4 < low < mean and high - mean == pytest.approx(mean - low)
    assert one == (0.3, 0.3, 0.3)  # one run: no interval
