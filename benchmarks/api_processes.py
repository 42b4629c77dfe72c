"""One study dispatched through an api of 1 or 2 uvicorn processes (the compose deployment's
BBKB_API_WORKERS) on PostgreSQL, with 2 RQ workers and a trivial objective.

Each api process caches the study's engine; when another process changed the study it catches up
from the trials that changed and rebuilds only when a batch opened meanwhile. Printed per
setting: wall seconds, evaluations per second, and the api's CPU milliseconds per evaluation
(all its processes). Figures (api CPU ms per evaluation, 1 / 2 processes, 2026-11-29, three runs
each on 2 shared cores, load average 1.3-2.1 with the benchmark's own processes)::

    OPENBLAS_NUM_THREADS=1 nice -n 10 python benchmarks/api_processes.py
        A = 5,000:   6.7 / 10.1,   6.6 / 10.5,   9.3 / 7.8
    ... --candidates 50000
        A = 50,000: 14.3 / 15.2,   8.2 / 15.2,   9.2 / 13.0

Two processes took 0.8-1.9x one's CPU. Which process serves a request depends on which
keep-alive connection the kernel gave it, and CPU time on this shared machine is not robust to
other load (one process, A = 50,000: 8.2 to 14.3 ms at load 1.7-2.1): compare settings
within one sitting. On the machine of 387ca68 (load under 1) the same command gave 4.4 / 5.5-5.9
and 4.6-4.7 / 4.8-6.8; before the catch-up, when every change cost a rebuild, 5.0-5.1 / 12.6 at
A = 5,000 (a7cfd5d, load ~5).

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
