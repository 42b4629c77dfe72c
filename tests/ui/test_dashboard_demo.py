"""``bbkb demo`` prints the dashboard's address, and the page shows the running study."""

from __future__ import annotations

import subprocess
import sys


def test_demo_prints_a_dashboard_that_shows_the_running_study(tmp_path, page):
    demo = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "demo", "--evaluations", "300", "--workers", "2",
         "--delay", "0.02", "--plot", str(tmp_path / "demo.png"),
         "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert demo.stdout is not None
        lines = []
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("dashboard: "):
                break
        else:
            raise AssertionError(f"no dashboard line in the demo's output: {lines}")
        url = line.split()[1]
        page.goto(f"{url}?poll=300")
        # Abalone arms have a known optimum: the regret plot fills while the workers run
        page.wait_for_function("() => { const p = document.querySelector('#plot-regret path');"
                               " return p !== null && Number(p.dataset.points) >= 5; }")
        assert "optimum 1" in page.text_content("#regret-caption")
        assert demo.wait(timeout=240) == 0
    finally:
        if demo.poll() is None:
            demo.terminate()
            demo.wait(timeout=30)
        if demo.stdout is not None:
            demo.stdout.close()
