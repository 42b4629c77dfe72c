"""One study dispatched through an api of 1 or 2 uvicorn processes (the compose deployment's
BBKB_API_WORKERS) on PostgreSQL, with 2 RQ workers and a trivial objective.

Each api process caches the study's engine; when another process changed the study it catches up
from the trials that changed and rebuilds only when a batch opened meanwhile. Figures (api CPU ms
per evaluation, 1 / 2 processes, two runs each, load average under 1 on 2 cores, explore 0.1):
A = 5,000: 4.4 / 5.5-5.9; A = 50,000: 4.6-4.7 / 4.8-6.8. Before explore 0.1 (load average ~5):
A = 5,000: 4.8-4.9 / 4.9-7.7 (before the catch-up, when every change cost a rebuild: 5.0-5.1 /
12.6); A = 50,000: 5.2-5.3 / 6.1-8.4. Which process serves a request depends on which keep-alive
connection the kernel gave it, so the 2-process figure varies run to run. Printed per
setting: wall seconds, evaluations per second, and the api's CPU milliseconds per evaluation
(all its processes; CPU time is robust to other load on a shared machine).

Usage: python benchmarks/api_processes.py [--quick] [--candidates A] [--evaluations N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import time
import uuid

import httpx2
import numpy as np
import psutil

from service.processes import RedisProcess, ServerProcess, start_postgres
from workers import runner


def _database() -> str:
    """A fresh database on an embedded PostgreSQL server (BBKB_TEST_PGDATA: kept in that data
    directory; else a fresh one, deleted at exit)."""
    import psycopg

    base = start_postgres(os.environ.get("BBKB_TEST_PGDATA")).get_uri()
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.replace("/postgres?", f"/{name}?")


def _cpu(pid: int) -> float:
    """CPU seconds of a process and its live children (the uvicorn workers)."""
    parent = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [parent, *parent.children(recursive=True)])


def run(api_processes: int, n_candidates: int, n_evaluations: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    candidates = np.column_stack([rng.uniform(-5, 10, n_candidates),
                                  rng.uniform(0, 15, n_candidates)])
    with contextlib.ExitStack() as stack:  # whatever fails, each started process is stopped
        redis = RedisProcess()
        stack.callback(redis.stop)
        redis.start()
        env = {"BBKB_DATABASE_URL": _database(), "BBKB_AUTH": "none", "BBKB_REDIS_URL": redis.url,
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        server = ServerProcess(env, workers=api_processes)
        stack.callback(server.stop)
        server.start()
        children: list[subprocess.Popen[bytes]] = []
        stack.callback(runner.stop, children, timeout=10)
        runner.spawn(redis.url, 2, env={"BBKB_URL": server.url}, children=children)
        with httpx2.Client(base_url=server.url, timeout=120) as http:
            sid = http.post("/v1/studies", json={
                "name": "api-processes", "candidates": candidates.tolist(),
                "objective": "function:branin",
                "engine": {"strategy": "bbkb", "mode": "async", "seed": 0,
                           "kernel": {"name": "rbf", "lengthscale": 3.0}}}).json()["id"]
            time.sleep(2.0)  # the workers register and import
            cpu, start = _cpu(server.proc.pid), time.perf_counter()
            http.post(f"/v1/studies/{sid}/dispatch",
                      json={"n_evaluations": n_evaluations, "parallelism": 4})
            while http.get(f"/v1/studies/{sid}/dispatch").json()["status"] != "done":
                time.sleep(0.1)
            wall = time.perf_counter() - start
            cpu = _cpu(server.proc.pid) - cpu
    return {"wall": wall, "cpu_ms": 1000 * cpu / n_evaluations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--candidates", type=int)
    parser.add_argument("--evaluations", type=int)
    args = parser.parse_args()
    n_candidates = args.candidates or (1000 if args.quick else 5000)
    n = args.evaluations or (100 if args.quick else 300)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"A = {n_candidates} candidates, {n} evaluations, 2 RQ workers, PostgreSQL")
    print("api processes | wall s | evaluations/s | api CPU ms per evaluation")
    for processes in (1, 2):
        r = run(processes, n_candidates, n)
        print(f"{processes:13d} | {r['wall']:6.1f} | {n / r['wall']:13.1f} | {r['cpu_ms']:8.1f}")


if __name__ == "__main__":
    main()
