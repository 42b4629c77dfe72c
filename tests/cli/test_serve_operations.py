"""`bbkb serve` as an operator runs it: several API processes, a database that is down or
newer than the code, a supervisor killed, JSON logs."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest

from service.processes import free_port

from ..shared_http import http


def _env(**variables: str) -> dict[str, str]:
    return {**os.environ, "BBKB_AUTH": "none", **variables}


def _bbkb(*args: str, env: dict[str, str], timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def test_several_processes_and_an_unreachable_database_exit_in_one_line():
    """With BBKB_AUTO_MIGRATE on (the default) the database was first used inside each API
    process: with BBKB_API_WORKERS=2 uvicorn's supervisor respawned them for good, thousands
    of log lines a minute. It is now checked (and migrated) once, before they start."""
    done = _bbkb("serve", "--port", str(free_port()), env=_env(
        BBKB_API_WORKERS="2", BBKB_DATABASE_URL="postgresql://u:secret@127.0.0.1:1/x"))
    assert done.returncode == 1
    assert done.stderr.startswith("bbkb serve: cannot use the database: ")
    assert len(done.stderr.strip().splitlines()) == 1 and "secret" not in done.stderr


def test_a_schema_newer_than_the_code_is_said_in_one_line(tmp_path):
    """A rollback to an older image after the newer one migrated: `bbkb migrate` and `bbkb
    serve` ended in Alembic's traceback ("Can't locate revision"), or advised `bbkb migrate`."""
    env = _env(BBKB_DATA_DIR=str(tmp_path))
    assert _bbkb("migrate", env=env).returncode == 0
    with sqlite3.connect(tmp_path / "bbkb.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '9999'")
    for args, variables in ((["migrate"], {}), (["serve", "--port", str(free_port())], {}),
                            (["serve", "--port", str(free_port())],
                             {"BBKB_AUTO_MIGRATE": "false"})):
        done = _bbkb(*args, env=env | variables)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith(f"bbkb {args[0]}: database schema is at '9999', which "
                                      "this code does not know"), done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="getppid after a SIGKILL")
def test_a_killed_supervisor_takes_its_processes_and_logs_json(tmp_path):
    """SIGKILL of `bbkb serve --workers 2` left both API processes serving, orphaned, holding
    the port (a restart failed: address in use); and with BBKB_LOG_FORMAT=json the
    supervisor's lines were uvicorn's plain text."""
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        serve = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
            env=_env(BBKB_API_WORKERS="2", BBKB_LOG_FORMAT="json",
                     BBKB_DATA_DIR=str(tmp_path)))
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if http.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.2)
        else:
            pytest.fail(f"the server did not start: {log.read_text()}")
        children = psutil.Process(serve.pid).children(recursive=True)
        assert len(children) >= 2
        serve.send_signal(signal.SIGKILL)
        serve.wait(10)
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert alive == [], [p.cmdline() for p in alive]
    finally:
        for child in psutil.Process().children(recursive=True):
            if child.pid == serve.pid or serve.pid in (p.pid for p in child.parents()):
                child.kill()
        serve.kill()
    lines = log.read_text().splitlines()
    assert lines and [line for line in lines if not line.startswith("{")] == []
    assert any("Started parent process" in json.loads(line)["msg"] for line in lines)
