"""Defects of an audit of the ``bbkb`` command and the SDK: a stale schema at ``bbkb serve``,
invalid log levels, ``study best`` / ``export`` under --json, a closed stdout pipe, the SDK's
outage message, ragged CSV files and uvicorn's colour codes in the logs."""

from __future__ import annotations

import importlib
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest

from client import Client
from service import logs
from service.cli import build_parser, main
from service.processes import free_port
from service.store.database import make_engine, sqlite_path

from ..shared_http import http

SPACE = json.dumps([{"name": "x", "low": 0, "high": 1}])


@pytest.fixture
def server(server_factory, tmp_path):  # type: ignore[no-untyped-def]
    return server_factory({"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
                           "BBKB_AUTH": "none", "BBKB_DATA_DIR": str(tmp_path)})


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``bbkb argv`` in this process: (exit code, stdout, stderr); SystemExit is an exit."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def bbkb_env(**changes: str | None) -> dict[str, str]:
    """This environment without any BBKB_* variable, then ``changes`` (None removes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BBKB_")}
    env.update({k: v for k, v in changes.items() if v is not None})
    return env


def bbkb(*argv: str, env: dict[str, str], stdout: Any = subprocess.PIPE
         ) -> subprocess.CompletedProcess[bytes]:
    """``bbkb argv`` in a child process (a guard timeout: a started server would not end)."""
    return subprocess.run([sys.executable, "-m", "service.cli", *argv], env=env,
                          stdout=stdout, stderr=subprocess.PIPE, timeout=300, check=False)


def test_serve_refuses_an_unmigrated_database_in_one_line(tmp_path: Path) -> None:
    database = tmp_path / "bbkb.db"
    env = bbkb_env(BBKB_DATABASE_URL=f"sqlite:///{database}", BBKB_AUTO_MIGRATE="false")
    done = bbkb("serve", "--no-auth", "--port", str(free_port()), env=env)
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith(f"bbkb serve: no database at {database}: run `bbkb migrate`"), err
    assert not database.exists()  # refused without creating an empty file

    sqlite3.connect(database).close()  # an empty database: no schema yet
    as_uri = f"sqlite:///file:{database}?mode=ro&uri=true"  # SQLite's URI form: not a path
    for url in (f"sqlite:///{database}", as_uri):
        done = bbkb("serve", "--no-auth", "--port", str(free_port()),
                    env=env | {"BBKB_DATABASE_URL": url})
        err = done.stderr.decode()
        assert done.returncode == 1, err
        assert err.startswith("bbkb serve: database schema is at None") and \
            err.count("\n") == 1, err
        assert "run `bbkb migrate`" in err


def test_an_sqlite_uri_is_not_taken_for_a_path(tmp_path: Path, monkeypatch) -> None:
    """``sqlite_path`` (serve's missing-file check, make_engine's parent directory) knows a
    file path from SQLite's URI form: make_engine made a directory "file:" in the cwd for it."""
    monkeypatch.chdir(tmp_path)
    database = tmp_path / "q.db"
    sqlite3.connect(database).close()
    as_uri = f"sqlite:///file:{database}?mode=ro&uri=true"
    assert sqlite_path(f"sqlite:///{database}") == database
    for url in (as_uri, "sqlite://", "sqlite:///:memory:", "postgresql+psycopg://u@h/d"):
        assert sqlite_path(url) is None, url
    make_engine(as_uri).dispose()
    assert list(tmp_path.iterdir()) == [database]


def test_a_new_data_dir_is_its_owners_alone(tmp_path: Path, monkeypatch) -> None:
    """The SQLite directory was made 0755 and the database 0644: any local user could read
    every study, its candidates and results. A new one is 0700; an existing one is kept."""
    monkeypatch.setenv("BBKB_DATA_DIR", str(tmp_path / "new" / "data"))
    monkeypatch.delenv("BBKB_DATABASE_URL", raising=False)
    assert main(["migrate"]) == 0
    assert (tmp_path / "new" / "data" / "bbkb.db").exists()
    assert (tmp_path / "new" / "data").stat().st_mode & 0o777 == 0o700
    kept = tmp_path / "shared"
    kept.mkdir(mode=0o755)
    kept.chmod(0o755)
    make_engine(f"sqlite:///{kept / 'k.db'}").dispose()
    assert kept.stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("command", [["migrate"], ["keys", "create", "--owner", "o"],
                                     ["serve", "--port", "0"]])
def test_bad_settings_and_an_unreachable_database_are_one_line(command: list[str]) -> None:
    """Each command, through ``_run``'s one handler (the bad URLs below take the same path)."""
    unreachable = f"postgresql+psycopg://bbkb:x@127.0.0.1:{free_port()}/bbkb"
    done = bbkb(*command, env=bbkb_env(BBKB_DATABASE_URL=unreachable,
                                       BBKB_AUTO_MIGRATE="false"))
    err = done.stderr.decode()
    assert done.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith(f"bbkb {command[0]}: cannot use the database: "), err

    done = bbkb(*command, env=bbkb_env(BBKB_DATABASE_BUSY_SECONDS="-3"))
    assert done.returncode == 1
    assert done.stderr.decode() == (f"bbkb {command[0]}: BBKB_DATABASE_BUSY_SECONDS: Input "
                                    "should be greater than 0; got '-3'\n")


def test_bad_database_and_redis_urls_are_one_line_without_their_password() -> None:
    command = ["migrate"]
    for url, reason in (("nonsense", "Could not parse"), ("foo://x/y", "Can't load plugin")):
        done = bbkb(*command, env=bbkb_env(BBKB_DATABASE_URL=url))
        err = done.stderr.decode()
        assert done.returncode == 1 and err.count("\n") == 1, err
        assert err.startswith(f"bbkb {command[0]}: BBKB_DATABASE_URL: not a database URL "
                              "SQLAlchemy can use") and reason in err, err

    # a dialect whose driver is not installed was a ModuleNotFoundError traceback at connect,
    # a malformed Redis URL a ValueError traceback; neither line shows a password
    for variable, url, reason in (
            ("BBKB_DATABASE_URL", "postgresql+psycopg2://u:secret@h/db",
             "the driver of 'postgresql+psycopg2' is not installed"),
            ("BBKB_REDIS_URL", "notaurl", "not a Redis URL"),
            ("BBKB_REDIS_URL", "redis://:secret@h:port/0", "not a Redis URL"),
            ("BBKB_METRICS_TOKEN", "secret", "Value should have at least 16 characters")):
        done = bbkb(*command, env=bbkb_env(**{variable: url}))
        err = done.stderr.decode()
        assert done.returncode == 1 and err.count("\n") == 1, err
        assert err.startswith(f"bbkb {command[0]}: {variable}: {reason}"), err
        assert "secret" not in err, err


@pytest.mark.parametrize("command", [["migrate"], ["keys", "create", "--owner", "o"],
                                     ["serve", "--port", "0"]])
def test_a_data_dir_that_cannot_be_created_is_one_line(command: list[str], tmp_path) -> None:
    """It was a traceback (serve's from inside uvicorn's application factory)."""
    (tmp_path / "file").write_text("")
    data_dir = tmp_path / "file" / "data"
    done = bbkb(*command, env=bbkb_env(BBKB_DATA_DIR=str(data_dir)))
    err = done.stderr.decode()
    assert done.returncode == 1 and err == f"bbkb {command[0]}: {data_dir}: Not a directory\n"


@pytest.mark.parametrize("port, why", [("99999", "a port is between 0 and 65535, got 99999"),
                                       ("http", "not a port number: 'http'")])
def test_a_bad_port_is_a_usage_error(port: str, why: str) -> None:
    """uvicorn took 99999 and listened on another port than the one it logged."""
    done = bbkb("serve", "--port", port, env=bbkb_env())
    err = done.stderr.decode()
    assert done.returncode == 2 and err.splitlines()[-1] == (
        f"bbkb serve: error: argument --port: {why}"), err


def test_a_port_in_use_is_one_error_line(tmp_path: Path) -> None:
    """uvicorn logged 'Application startup complete', then an ERROR, and exited 3."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = bbkb("serve", "--no-auth", "--port", str(port),
                    env=bbkb_env(BBKB_DATA_DIR=str(tmp_path)))
    assert done.returncode == 1 and done.stderr.decode() == (
        f"bbkb serve: cannot listen on 127.0.0.1:{port}: Address already in use (another "
        "server? choose --port)\n"), done.stderr


@pytest.mark.parametrize("variable, value, why", [
    ("BBKB_PORT", "abc", "not a port number: 'abc'"),
    ("BBKB_PORT", "99999", "a port is between 0 and 65535, got 99999"),
    ("BBKB_API_WORKERS", "0", "at least 1 process, got 0")])
def test_a_bad_port_or_process_count_from_the_environment_is_one_line(variable: str, value: str,
                                                                       why: str) -> None:
    """As argparse defaults they were usage errors (exit 2) naming --port or --workers, which
    nobody gave; like every BBKB_* setting, they now exit 1 naming the variable."""
    done = bbkb("serve", "--no-auth", env=bbkb_env(**{variable: value}))
    assert done.returncode == 1 and done.stderr.decode() == (
        f"bbkb serve: {variable}: {why}\n"), done.stderr


@pytest.mark.parametrize("workers, why", [("0", "at least 1 process, got 0"),
                                          ("two", "not a whole number: 'two'")])
def test_a_bad_number_of_server_processes_is_a_usage_error(workers: str, why: str) -> None:
    """--workers 0 started one process, silently."""
    done = bbkb("serve", "--workers", workers, env=bbkb_env())
    err = done.stderr.decode()
    assert done.returncode == 2 and err.splitlines()[-1] == (
        f"bbkb serve: error: argument --workers: {why}"), err


def test_an_invalid_log_format_is_one_error_line(tmp_path: Path) -> None:
    """Only serve refused it (through Settings); bbkb worker fell back to text in silence. An
    empty one is unset for every command (Settings refused it, the worker took it as text)."""
    for command in (["worker", "--redis-url", "redis://127.0.0.1:1/0"], ["--help"]):
        done = bbkb(*command, env=bbkb_env(BBKB_LOG_FORMAT="xml"))
        assert done.returncode == 1 and not done.stdout
        assert done.stderr.decode() == "bbkb: BBKB_LOG_FORMAT: expected text or json, got 'xml'\n"
    done = bbkb("migrate", env=bbkb_env(BBKB_LOG_FORMAT="", BBKB_DATA_DIR=str(tmp_path)))
    assert done.returncode == 0, done.stderr


def test_an_invalid_log_level_is_one_error_line(tmp_path: Path) -> None:
    done = bbkb("--help", env=bbkb_env(BBKB_LOG_LEVEL="loud"))
    assert done.returncode == 1 and not done.stdout
    assert done.stderr.decode() == ("bbkb: BBKB_LOG_LEVEL: unknown log level 'loud' (choose "
                                    "from debug, info, warning, error, critical)\n")

    done = bbkb("serve", "--log-level", "loud", "--port", str(free_port()),
                env=bbkb_env(BBKB_DATA_DIR=str(tmp_path)))
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("bbkb serve: error: argument --log-level: invalid "
                                           "choice: 'loud'"), err
    # any case, as BBKB_LOG_LEVEL allows it; uvicorn only knows lower-case names
    assert build_parser().parse_args(["serve", "--log-level", "WARNING"]).log_level == "warning"


def test_best_without_a_completed_trial(server, capsys) -> None:
    url = ["--url", server.url]
    assert run(capsys, "study", "create", "s", "--search-space", SPACE, "--n-candidates", "4",
               *url)[0] == 0
    assert run(capsys, "study", "best", "s", *url) == (1, "", "error: no completed trial yet\n")
    code, out, err = run(capsys, "study", "best", "s", "--json", *url)
    assert code == 1 and json.loads(out) is None and not err


def test_export_json_names_the_file_and_its_rows(server, capsys, tmp_path) -> None:
    url = ["--url", server.url]
    assert run(capsys, "study", "create", "s", "--search-space", SPACE, "--n-candidates", "8",
               *url)[0] == 0
    with Client(server.url) as client:
        study = client.study("s")
        trials = study.ask("w", count=3).trials
        study.tell(trials[0].id, 1.5, worker_id="w")
    target = tmp_path / "out.csv"
    code, out, err = run(capsys, "study", "export", "s", "-o", str(target), "--json", *url)
    assert code == 0 and not err
    assert json.loads(out) == {"path": str(target), "rows": len(trials)}
    assert len(target.read_text().splitlines()) == len(trials) + 1
    code, out, err = run(capsys, "study", "export", "s", "-o", str(target), *url)
    assert code == 0 and not out and err == f"wrote {target}\n"


def test_a_closed_stdout_ends_quietly(server) -> None:
    with Client(server.url) as client:
        for i in range(25):  # --json: more than one 8 KiB buffer, written before the end
            client.create_study(f"study-{i}", search_space=json.loads(SPACE), n_candidates=3)
    reader, writer = os.pipe()
    os.close(reader)  # every write to the pipe fails (EPIPE)
    try:
        for extra in ([], ["--json"]):
            done = bbkb("study", "list", "--url", server.url, *extra, env=bbkb_env(),
                        stdout=writer)
            assert done.returncode == 1 and done.stderr == b"", (extra, done.stderr)
    finally:
        os.close(writer)
    ours, theirs = socket.socketpair()  # a socket whose peer is gone (poll: a hang-up, no error)
    theirs.close()
    try:
        done = bbkb("study", "list", "--url", server.url, "--json", env=bbkb_env(), stdout=ours)
        assert done.returncode == 1 and done.stderr == b"", done.stderr
    finally:
        ours.close()


class FakeTime:
    """``time`` for the SDK: a clock that only ``sleep`` moves, recording every sleep."""

    def __init__(self) -> None:
        self.now, self.sleeps = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


class RefuseAsks(httpx2.BaseTransport):
    """The real server, except that the first ``n`` asks for trials find it down."""

    def __init__(self, n: int) -> None:
        self.inner, self.left = httpx2.HTTPTransport(), n

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/suggestions") and self.left > 0:
            self.left -= 1
            raise httpx2.ConnectError("connection refused", request=request)
        return self.inner.handle_request(request)

    def close(self) -> None:  # the client closes its transport: ours closes the real one's pool
        self.inner.close()


def test_optimize_logs_the_true_length_of_an_outage(server, monkeypatch, caplog) -> None:
    clock = FakeTime()
    for module in ("client.client", "client.loop"):
        monkeypatch.setattr(importlib.import_module(module), "time", clock)
    retries = 5
    with httpx2.Client(transport=RefuseAsks(retries + 1), base_url=server.url) as transport_http:
        sdk = Client(http=transport_http, retries=retries, backoff=1.0)
        study = sdk.create_study("s", search_space=json.loads(SPACE), n_candidates=8)
        with caplog.at_level(logging.WARNING, logger="bbkb.client"):
            result = study.optimize(lambda x: x, 1, n_workers=1, progress=False)
    assert result.n_completed == 1
    [record] = [r for r in caplog.records if r.getMessage().startswith("server unavailable")]
    client_waits = sum(clock.sleeps[:retries])  # the client's backoff between its 6 attempts
    assert client_waits > 0 and record.args[0] == pytest.approx(client_waits)
    assert record.getMessage().startswith(f"server unavailable for {client_waits:.1f} s, ")


@pytest.mark.parametrize(("text", "expected"), [
    ("a,b\n1,2\n\n1,2,3\n", "line 4 has 3 columns, expected 2 as in the header"),
    ("1,2\n3,4\n5\n", "line 3 has 1 column, expected 2 as in line 1"),
    # another separator: its first line reads as a one-column header
    ("1;2\n3;4\n", "row 1, column 1 ('1;2'): '3;4' is not a number; columns are separated "
                   "by commas"),
])
def test_a_ragged_csv_names_the_line(tmp_path, capsys, text, expected) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text(text)
    code, out, err = run(capsys, "study", "create", "s", "--candidates", str(path),
                         "--url", "http://127.0.0.1:9")
    assert (code, out) == (1, "")
    assert err == f"error: cannot read candidates from {path}: {expected}\n"


def test_logs_drop_uvicorn_color_message(tmp_path) -> None:
    record = logging.LogRecord("uvicorn.error", logging.INFO, "", 0, "running on %s", ("x",),
                               None)
    record.color_message, record.study_id = "running on \x1b[1m%s\x1b[0m", 3
    assert logs.TextFormatter().format(record).endswith(" running on x study_id=3")
    assert "color_message" not in json.loads(logs.JsonFormatter().format(record))

    port = free_port()
    log_file = tmp_path / "serve.log"
    with log_file.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--no-auth",
                                 "--port", str(port)], stderr=out,
                                env=bbkb_env(BBKB_DATA_DIR=str(tmp_path / "d")))
        try:
            for _ in range(1200):  # a guard: at most a minute or so
                if proc.poll() is not None or _ready(f"http://127.0.0.1:{port}"):
                    break
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    text = log_file.read_text()
    assert "Uvicorn running on" in text, text
    assert "color_message" not in text and "\x1b" not in text, text


def _ready(url: str) -> bool:
    try:
        return http.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx2.HTTPError:
        return False


@pytest.mark.parametrize("owner", ["", "   ", "a\tb", "x" * 201])
def test_keys_need_a_real_owner_name(capsys, owner: str) -> None:
    """``--owner ''`` created a key for an owner with an empty name."""
    for command in ("create", "ensure"):
        extra = ["--file", "unused"] if command == "ensure" else []
        code, _, err = run(capsys, "keys", command, "--owner", owner, *extra)
        assert code == 2 and "an owner name is 1 to 200 printable characters" in err, err


@pytest.mark.parametrize("value", ["abc", "inf", "1e400", "-5", "nan", "0", "1e9"])
def test_a_bad_worker_retry_budget_is_one_error_line(value: str) -> None:
    """'abc' blamed BBKB_URL, inf and 1e400 raised an OverflowError traceback, and -5, nan or 0
    gave no retries at all (results then no longer survived an API restart)."""
    done = bbkb("worker", "--redis-url", "redis://127.0.0.1:1/0",
                env=bbkb_env(BBKB_WORKER_RETRY_SECONDS=value))
    assert done.returncode == 1 and done.stderr.decode() == (
        "bbkb worker: BBKB_WORKER_RETRY_SECONDS must be a number of seconds in (0, 86400], "
        f"got {value!r}\n"), done.stderr


def test_the_help_names_every_command_and_every_fallback(capsys) -> None:
    """The audit: bbkb --help's summary line left out queue; bbkb serve --help had no
    description, and --host / --workers named only their variables, not the values used
    without them (127.0.0.1, 1), while --port said "else 8000"."""
    import argparse

    parser = build_parser()
    summary = parser.description or ""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert [name for name in commands.choices if name not in summary] == []
    serve = commands.choices["serve"]
    assert serve.description and "BBKB_" in serve.description
    helps = {a.dest: a.help or "" for a in serve._actions}
    for dest, variable, fallback in (
            ("host", "BBKB_HOST", "127.0.0.1"), ("port", "BBKB_PORT", "8000"),
            ("workers", "BBKB_API_WORKERS", "1"), ("log_level", "BBKB_LOG_LEVEL", "info"),
            ("data_dir", "BBKB_DATA_DIR", "./bbkb-data")):
        assert f"default: {variable}, else {fallback}" in helps[dest], (dest, helps[dest])
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = capsys.readouterr().out
    assert "default: BBKB_HOST, else 127.0.0.1" in shown and "OpenAPI" in shown, shown


def test_bbkb_worker_takes_the_runners_own_options(capsys) -> None:
    """``bbkb worker`` forwards its arguments to workers.runner (one parser, not two)."""
    code, out, _ = run(capsys, "worker", "--help")
    assert code == 0 and "--processes" in out and "SIGHUP" in out
    code, _, err = run(capsys, "worker", "-n", "0", "--redis-url", "redis://127.0.0.1:1/0")
    assert code == 2 and "--processes must be at least 1, got 0" in err


def test_an_empty_database_url_is_unset(tmp_path: Path) -> None:
    """``BBKB_DATABASE_URL=`` (compose passes an unset variable as empty) was refused ("Could
    not parse SQLAlchemy URL") where an empty BBKB_REDIS_URL or BBKB_LOG_FORMAT is unset: it
    is unset too, the SQLite file in BBKB_DATA_DIR."""
    done = bbkb("migrate", env=bbkb_env(BBKB_DATABASE_URL="", BBKB_DATA_DIR=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "bbkb.db").exists()
