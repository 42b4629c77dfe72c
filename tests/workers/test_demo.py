"""The README's main job: ``bbkb demo`` runs the whole system end to end and exits 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from .helpers import as_at_a_terminal


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
    # the password is not printed
    redis_port = re.search(r"Redis redis://:\*\*\*@127\.0\.0\.1:(\d+)/", result.stdout).group(1)
    # redis-server renames itself to its address
    leftovers = subprocess.run(["pgrep", "-af", f"127.0.0.1:{redis_port}"],
                               capture_output=True, text=True)
    assert [line for line in leftovers.stdout.splitlines() if "pgrep" not in line] == []


def _started_demo(tmp_path, delay: float = 0.5  # type: ignore[no-untyped-def]
                  ) -> tuple[subprocess.Popen[str], list, str]:  # type: ignore[type-arg]
    """``bbkb demo`` in a session of its own (as at a terminal) once evaluations run, every
    process it started, and its Redis URL."""
    import psutil

    demo = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "demo", "--evaluations", "100000", "--workers", "2",
         "--delay", str(delay), "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=as_at_a_terminal())
    assert demo.stdout is not None
    printed = re.match(r"Redis (redis://\S+),", demo.stdout.readline())
    assert printed is not None and ":***@" in printed.group(1)  # the password is not shown
    for line in demo.stdout:  # Redis, API and workers are up once the dashboard is announced
        if line.startswith("dashboard:"):
            break
    processes = psutil.Process(demo.pid).children(recursive=True)
    assert len(processes) >= 4, processes  # Redis, the server, two workers
    # the URL with its password: in the environment of the server and the workers only
    urls = {p.environ().get("BBKB_REDIS_URL") for p in processes} - {None}
    assert len(urls) == 1 and ":***@" not in next(iter(urls)), urls
    url = urls.pop()
    password = url.split("@", 1)[0].rsplit(":", 1)[1]
    assert len(password) >= 20 and not any(password in " ".join(p.cmdline()) for p in processes)
    return demo, processes, url


def _all_gone(processes: list, timeout: float) -> bool:  # type: ignore[type-arg]
    """Whether every process exited within ``timeout`` s (a zombie has: orphans here may never
    be reaped)."""
    import time

    import psutil

    def gone(process: psutil.Process) -> bool:
        try:
            return process.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    deadline = time.monotonic() + timeout
    while not all(gone(p) for p in processes):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["int", "hup"])
def test_ctrl_c_stops_the_demo_in_order_and_quietly(tmp_path, signum):
    """Ctrl-C (or the terminal's hangup) reaches the whole foreground group; only the demo acts
    on it and stops the workers (warm), then the server, then Redis: before, each took Ctrl-C
    at once, and the workers' last posts and RQ's deregistration met a server and a Redis
    already gone (tracebacks, 10 s); a hangup killed the demo and its workers on the spot."""
    demo, processes, _ = _started_demo(tmp_path)
    os.killpg(demo.pid, signum)
    out, _ = demo.communicate(timeout=60)
    assert demo.returncode == 130 and "interrupted: every process was stopped" in out, out
    assert "Traceback" not in out and "could not connect" not in out.lower(), out[-3000:]
    assert _all_gone(processes, timeout=5)


def test_a_second_ctrl_c_stops_the_workers_cold_and_still_stops_everything(tmp_path):
    """A second Ctrl-C while the demo waits for its workers' 8 s evaluations stops them at once
    (no 10 s wait), and the server and Redis are still stopped after them."""
    import time

    from redis import Redis
    from rq import Worker

    demo, processes, redis_url = _started_demo(tmp_path, delay=8.0)
    with Redis.from_url(redis_url) as connection:  # until both workers are inside an evaluation
        deadline = time.monotonic() + 60
        while [w.get_state() for w in Worker.all(connection=connection)] != ["busy"] * 2:
            assert time.monotonic() < deadline, "the workers never evaluated"
            time.sleep(0.1)
    os.killpg(demo.pid, signal.SIGINT)
    time.sleep(1.0)
    started = time.monotonic()
    os.killpg(demo.pid, signal.SIGINT)
    out, _ = demo.communicate(timeout=60)
    assert demo.returncode == 130 and time.monotonic() - started < 6, out[-3000:]
    assert "interrupted: every process was stopped" in out
    assert "ConnectionError" not in out, out[-3000:]  # Redis and the server outlived the workers
    assert _all_gone(processes, timeout=5)


def test_a_demo_killed_by_sigkill_leaves_no_process_behind(tmp_path):
    """No handler sees a SIGKILL: Redis and the server die with their parent (Linux's parent
    death signal), the workers notice that their parent is gone."""
    demo, processes, _ = _started_demo(tmp_path)
    demo.kill()
    demo.communicate(timeout=30)
    assert _all_gone(processes, timeout=30)
