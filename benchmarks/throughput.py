"""End-to-end throughput of the distributed system (issue 4 targets).

Real Redis, one API server process on SQLite, N RQ worker processes, server-side dispatch:

1. A trivial objective (``function:branin`` at the candidate, no delay) with 8 workers:
   evaluations per second end to end, and the service's overhead per evaluation.
2. Scaling: an objective taking 0.5 s, the same number of evaluations with 1 and 8 workers.

Usage: python benchmarks/throughput.py [--quick]

Figures (2026-11-29, five runs of ``OPENBLAS_NUM_THREADS=1 nice -n 10 python
benchmarks/throughput.py`` on 2 shared cores, load average 0.7-2.3): 151-183 evaluations/s;
CPU per evaluation server 4.72-5.88 ms, workers 1.78-2.01 ms, total 6.53-7.90 ms; 0.5 s
objective speed-up 6.09-6.30x. Without httptools and uvloop (``UVICORN_HTTP=h11
UVICORN_LOOP=asyncio`` before the same command, five runs alternating with those): server
4.83-6.31 ms, mean 5.65 against 5.16.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import httpx2
import numpy as np

from service.processes import RedisProcess, ServerProcess
from workers import runner


def _wait_for_workers(redis_url: str, n: int, timeout: float = 120) -> None:
    """Timing starts once every worker process has registered with Redis."""
    from redis import Redis
    from rq import Worker

    connection, deadline = Redis.from_url(redis_url), time.monotonic() + timeout
    while Worker.count(connection=connection) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {Worker.count(connection=connection)} of {n} workers up")
        time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(n_evaluations: int, workers: int, delay: float, parallelism: int) -> dict[str, float]:
    """Wall seconds from dispatch to the last result, and the CPU seconds each part spent.

    CPU time leaves out waiting for a core, but on a shared machine it still varies run to run
    (server 4.72-5.88 ms per evaluation in five runs); 2 cores / (CPU seconds per evaluation)
    bounds the throughput a quiet 2-core machine can reach."""
    rng = np.random.default_rng(0)
    candidates = np.column_stack([rng.uniform(-5, 10, 4000), rng.uniform(0, 15, 4000)])
    with tempfile.TemporaryDirectory() as tmp:
        redis = RedisProcess().start()
        env = {"BBKB_DATA_DIR": tmp, "BBKB_AUTH": "none", "BBKB_REDIS_URL": redis.url}
        server = ServerProcess(env).start()
        children = runner.spawn(redis.url, workers, env={"BBKB_URL": server.url})
        try:
            with httpx2.Client(base_url=server.url, timeout=120) as http:
                sid = http.post("/v1/studies", json={
                    "name": "throughput", "candidates": candidates.tolist(),
                    "objective": f"function:branin?delay={delay}",
                    "engine": {"strategy": "bbkb", "mode": "async", "explore": 0.1,
                               "kernel": {"name": "rbf", "lengthscale": 3.0}}}).json()["id"]
                _wait_for_workers(redis.url, workers)
                parts = {"server": [server.proc.pid], "redis": [redis.proc.pid],
                         "workers": [c.pid for c in children]}
                before = {k: sum(map(cpu_seconds, pids)) for k, pids in parts.items()}
                start = time.perf_counter()
                http.post(f"/v1/studies/{sid}/dispatch", json={
                    "n_evaluations": n_evaluations, "parallelism": parallelism})
                while http.get(f"/v1/studies/{sid}/dispatch").json()["status"] != "done":
                    time.sleep(0.2)
                wall = time.perf_counter() - start
                cpu = {k: sum(map(cpu_seconds, pids)) - before[k] for k, pids in parts.items()}
                return {"wall": wall, **{f"cpu_{k}": v for k, v in cpu.items()}}
        finally:
            runner.stop(children, timeout=10)
            server.stop()
            redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 300 if args.quick else 2000
    n = int(os.environ.get("TP_N", n))
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    fast = run(n, workers=8, delay=0.0, parallelism=16)
    wall = fast["wall"]
    per = {k[4:]: 1000 * v / n for k, v in fast.items() if k.startswith("cpu_")}
    total = sum(per.values())
    print(f"trivial objective, 8 workers: {n} evaluations in {wall:.1f} s = {n / wall:.0f} "
          f"evaluations/s")
    print("  CPU per evaluation: " + ", ".join(f"{k} {v:.2f} ms" for k, v in per.items())
          + f"; total {total:.2f} ms -> at most {2000 / total:.0f} evaluations/s on 2 idle cores")
    n_slow = 16 if args.quick else 48
    one = run(n_slow, workers=1, delay=0.5, parallelism=1)["wall"]
    eight = run(n_slow, workers=8, delay=0.5, parallelism=8)["wall"]
    print(f"0.5 s objective, {n_slow} evaluations: 1 worker {one:.1f} s, 8 workers {eight:.1f} s"
          f" -> speed-up {one / eight:.2f}x (ideal 8x)")


if __name__ == "__main__":
    main()
