"""Read endpoints and the first ask after a large warm start, against a real server process.

For each size n: a study of 2000 candidates (d = 3) on SQLite gets n observations through the
CSV warm-start import (50 000 per request), then one ask (the engine's first batch over all of
them: dictionary and hyper-parameter fit), then the median wall time of 7 calls of each read
endpoint that pollers (``study.wait``, the dashboard's studies page) call. None of them may grow
with n: the counts come from index lookups (t is dense per study) or from the study's engine.
The dashboard's history view, which returns every point, is ``dashboard.py``'s.

Usage: python benchmarks/read_latency.py [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import httpx
import numpy as np

from service.processes import ServerProcess

CHUNK = 50_000


def run(n: int) -> None:
    rng = np.random.default_rng(0)
    candidates = rng.uniform(size=(2000, 3))
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess({"BBKB_DATA_DIR": tmp, "BBKB_AUTH": "none"}).start()
        try:
            with httpx.Client(base_url=server.url, timeout=600) as http:
                sid = http.post("/v1/studies", json={
                    "name": "reads", "candidates": candidates.tolist(),
                    "engine": {"strategy": "bbkb", "mode": "async"}}).json()["id"]
                began = time.perf_counter()
                for start in range(0, n, CHUNK):
                    rows = range(start, min(n, start + CHUNK))
                    body = "candidate,value\n" + "\n".join(
                        f"{i % 2000},{np.sin(i * 0.37):.6f}" for i in rows)
                    r = http.post(f"/v1/studies/{sid}/observations.csv", content=body,
                                  headers={"content-type": "text/csv"})
                    r.raise_for_status()
                imported = time.perf_counter() - began
                began = time.perf_counter()
                http.post(f"/v1/studies/{sid}/suggestions",
                          json={"worker_id": "w", "count": 1}).raise_for_status()
                first_ask = time.perf_counter() - began
                print(f"n = {n}: import {imported:.1f} s, first ask {first_ask:.2f} s")
                for path in (f"/v1/studies/{sid}", "/v1/studies", f"/v1/studies/{sid}/dispatch",
                             f"/v1/studies/{sid}/best", f"/v1/studies/{sid}/trials?limit=50",
                             f"/v1/studies/{sid}/batches", "/v1/summaries"):
                    times = []
                    for _ in range(7):
                        began = time.perf_counter()
                        http.get(path).raise_for_status()
                        times.append(time.perf_counter() - began)
                    print(f"  GET {path:34s} median {1000 * np.median(times):7.1f} ms")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    for n in args.sizes:
        run(n)


if __name__ == "__main__":
    main()
