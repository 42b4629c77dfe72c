"""``bbkb demo`` checks its options before starting anything, and never polls forever.

Each test runs the real command. A demo that does not exit in time gets SIGTERM, which makes it
stop its processes, so a hanging demo fails the test without leaving Redis or workers behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

#: The demo's first line once Redis and the server run.
STARTED = re.compile(r"Redis redis://:\*\*\*@127\.0\.0\.1:(\d+)/0, API http://127\.0\.0\.1:(\d+)")


def _demo(args: list[str], timeout: float,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "demo", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the demo stops its processes on SIGTERM
        try:
            proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        pytest.fail(f"bbkb demo {' '.join(args)} did not exit within {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _leftovers(stdout: str) -> list[str]:
    """Processes still running from the demo's Redis and server ports."""
    match = STARTED.search(stdout)
    if match is None:
        return []
    redis_port, api_port = match.groups()
    found = []
    for pattern in (f"--port {redis_port}", f"--port {api_port}", f"127.0.0.1:{redis_port}"):
        result = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True)
        found += [line for line in result.stdout.splitlines()
                  if "pgrep" not in line and line.strip()]
    return found


#: (options, the option the error names); {file} is a regular file, {tmp} a directory.
BAD_OPTIONS = {
    "no evaluations": (["--evaluations", "0"], "--evaluations"),
    "negative evaluations": (["--evaluations", "-5"], "--evaluations"),
    "too many evaluations": (["--evaluations", "10000001"], "--evaluations"),
    "no workers": (["--workers", "0"], "--workers"),
    # --workers is checked before --data-dir, and the old demo failed on the data dir (a file)
    # before it spawned any worker: this case cannot fork thousands of processes on any version
    "huge workers": (["--workers", "5001", "--data-dir", "{file}"], "--workers"),
    "workers over the bound": (["--workers", "65", "--data-dir", "{file}"], "--workers"),
    "infinite delay": (["--delay", "inf"], "--delay"),
    "nan delay": (["--delay", "nan"], "--delay"),
    "negative delay": (["--delay", "-1"], "--delay"),
    "delay past the job timeout": (["--delay", "1e12"], "--delay"),
    "plot in a missing directory": (["--plot", "/nonexistent/dir/p.png"], "--plot"),
    "plot under a file": (["--plot", "{file}/p.png"], "--plot"),
    "plot is a directory": (["--plot", "{tmp}"], "--plot"),
    "plot format unknown": (["--plot", "{tmp}/p.nosuchformat"], "--plot"),
    "data dir is a file": (["--data-dir", "{file}"], "--data-dir"),
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", list(BAD_OPTIONS))
def test_bad_options_stop_before_anything_starts(case, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    options, option = BAD_OPTIONS[case]
    args = [a.format(file=a_file, tmp=tmp_path) for a in options]
    defaults = {"--evaluations": "2", "--workers": "1", "--delay": "0",
                "--plot": str(tmp_path / "demo.png"), "--data-dir": str(tmp_path / "data")}
    for name, value in defaults.items():  # small, so that a demo that does start ends soon
        if name not in args:
            args = [*args, name, value]
    result = _demo(args, timeout=30)
    assert result.returncode == 2, (result.stdout[-2000:], result.stderr[-2000:])
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1 and error.startswith("bbkb demo: error: ")
    assert option in error
    assert STARTED.search(result.stdout) is None  # neither Redis nor the server started
    assert not (tmp_path / "data").exists() and not (tmp_path / "demo.png").exists()


def test_help_lists_the_bounds():
    result = _demo(["--help"], timeout=30)
    assert result.returncode == 0
    assert "1 to 64" in result.stdout


@pytest.mark.timeout(120)
def test_demo_stops_when_every_worker_exits_and_nothing_completed(tmp_path):
    """Workers that cannot start (their API key file is missing) leave nothing that can make
    progress: the demo says so, reports zero completed evaluations, saves no plot, exits 1 and
    stops Redis and the server (the old demo polled forever)."""
    plot = tmp_path / "demo.png"
    result = _demo(["--evaluations", "20", "--workers", "2", "--delay", "0", "--plot", str(plot),
                    "--data-dir", str(tmp_path / "data")], timeout=80,
                   env={"BBKB_API_KEY_FILE": str(tmp_path / "missing-key")})
    assert result.returncode == 1, (result.stdout[-2000:], result.stderr[-3000:])
    assert "every worker process exited" in result.stderr
    assert "no evaluation completed" in result.stdout
    assert "Traceback" not in result.stderr.split("stopped early")[-1]  # the demo's own end
    assert not plot.exists()
    assert STARTED.search(result.stdout) is not None
    assert _leftovers(result.stdout) == []
