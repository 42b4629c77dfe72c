"""The README's main job: ``bbkb demo`` runs the whole system end to end and exits 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def test_demo_runs_end_to_end(tmp_path):
    plot = tmp_path / "demo.png"
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "demo", "--evaluations", "60", "--workers", "2",
         "--delay", "0.01", "--plot", str(plot), "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "BBKB_PAGE_LIMIT": "25"})  # the summary must read every page
    assert result.returncode == 0, result.stderr[-3000:]
    assert "60 evaluations" in result.stdout and "regret ratio vs uniform" in result.stdout
    found = re.search(r"best arm found: f = ([\d.]+) .* best observed value ([\d.]+)",
                      result.stdout)
    assert found is not None and 0.0 < float(found.group(1)) <= 1.0, result.stdout
    assert plot.exists() and plot.stat().st_size > 10_000
    redis_port = re.search(r"Redis redis://127\.0\.0\.1:(\d+)/", result.stdout).group(1)
    # workers name Redis's address on their command line; redis-server renames itself to it
    leftovers = subprocess.run(["pgrep", "-af", f"127.0.0.1:{redis_port}"],
                               capture_output=True, text=True)
    assert [line for line in leftovers.stdout.splitlines() if "pgrep" not in line] == []
