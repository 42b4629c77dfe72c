"""``bbkb worker``: N RQ worker processes on the ``bbkb`` queue.

Each process is an RQ ``SimpleWorker`` (RQ owns the loop, job timeouts and signals): jobs run in
the worker process itself rather than in a fork per job, so imports, loaded data sets and HTTP
connections are paid once per process, not once per evaluation (a fork per job cost ~1 s here).
A job past its timeout is interrupted by RQ's alarm-based death penalty. SIGTERM or Ctrl-C lets
the job in progress finish its evaluation (a warm shutdown: it takes no next trial); a second
one stops it. A worker needs
only ``BBKB_REDIS_URL`` (or ``--redis-url``) and ``BBKB_URL`` (+ ``BBKB_API_KEY`` or
``BBKB_API_KEY_FILE``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence

QUEUE = "bbkb"


def work(redis_url: str, burst: bool = False) -> None:
    """Run one RQ worker in this process until stopped (or the queue is empty, with burst)."""
    from redis import Redis
    from rq import Queue, SimpleWorker

    import service.problems  # noqa: F401 - the built-in objectives' numpy/scipy, paid at start
    import workers.job  # noqa: F401 - import once, before the first job

    class Worker(SimpleWorker):
        def request_stop(self, signum, frame):  # type: ignore[no-untyped-def]
            workers.job.stopping.set()  # the job in progress takes no next trial
            super().request_stop(signum, frame)

    if os.environ.get("BBKB_URL"):
        workers.job._client()  # the SDK client (TLS context, connection pool) before any job
    connection = Redis.from_url(redis_url)
    worker = Worker([Queue(QUEUE, connection=connection)], connection=connection)
    worker.work(burst=burst, logging_level="WARNING")


def spawn(redis_url: str, processes: int, env: dict[str, str] | None = None,
          burst: bool = False) -> list[subprocess.Popen[bytes]]:
    """Start ``processes`` worker processes (the caller stops them with SIGTERM)."""
    cmd = [sys.executable, "-m", "workers.runner", "--redis-url", redis_url]
    if burst:
        cmd.append("--burst")
    return [subprocess.Popen(cmd, env={**os.environ, **(env or {})}) for _ in range(processes)]


def stop(children: Sequence[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="bbkb worker", description=__doc__)
    parser.add_argument("--redis-url", default=os.environ.get("BBKB_REDIS_URL"))
    parser.add_argument("--processes", "-n", type=int, default=1)
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    args = parser.parse_args(argv)
    if not args.redis_url:
        parser.error("give --redis-url or set BBKB_REDIS_URL")
    if args.processes == 1:
        work(args.redis_url, burst=args.burst)
        return 0
    children = spawn(args.redis_url, args.processes, burst=args.burst)
    signal.signal(signal.SIGTERM, lambda *_: stop(children))
    try:
        for child in children:
            child.wait()
    except KeyboardInterrupt:
        stop(children)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
