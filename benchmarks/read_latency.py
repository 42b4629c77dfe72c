"""Read endpoints and the first ask after a large warm start, against a real server process.

For each size n: a study of 2000 candidates (d = 3) on SQLite gets n observations through the
CSV warm-start import (50 000 per request), then one ask (the engine's first batch over all of
them: dictionary and hyper-parameter fit), then the median wall time of 7 calls of each read
endpoint that pollers (``study.wait``, the dashboard's studies page) call. None of them may grow
with n: the counts come from index lookups (t is dense per study) or from the study's engine.
The dashboard's history view, which returns every point, is ``dashboard.py``'s.

With ``--candidates A --dim d`` (issue 3's audit: 10^6 x 50), a study instead gets an A x d
``.npy`` upload over HTTP and 100 imported observations of random candidates, then pages of
trials are timed (median of 7) with the study's engine loaded (parameters decoded from the
matrix the runtime holds) and after a server restart (engine not loaded: the page reads the
candidate blocks holding its trials, 26 MB each at d = 50).

Usage: python benchmarks/read_latency.py [--sizes 10000 100000]
       python benchmarks/read_latency.py --candidates 1000000 --dim 50
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time

import httpx2
import numpy as np

from service.processes import ServerProcess

CHUNK = 50_000


def run(n: int) -> None:
    rng = np.random.default_rng(0)
    candidates = rng.uniform(size=(2000, 3))
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess({"BBKB_DATA_DIR": tmp, "BBKB_AUTH": "none"}).start()
        try:
            with httpx2.Client(base_url=server.url, timeout=600) as http:
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


def _median_ms(http: httpx2.Client, path: str, params: dict | None = None) -> float:
    times = []
    for _ in range(7):
        began = time.perf_counter()
        http.get(path, params=params).raise_for_status()
        times.append(time.perf_counter() - began)
    return 1000 * float(np.median(times))


def run_upload(n_candidates: int, dim: int) -> None:
    """Pages of trials of a study with an uploaded n_candidates x dim matrix (see module doc)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"BBKB_DATA_DIR": tmp, "BBKB_AUTH": "none"}
        server = ServerProcess(env).start()
        try:
            with httpx2.Client(base_url=server.url, timeout=1800) as http:
                sid = http.post("/v1/studies", json={
                    "name": "big", "upload": True,
                    "engine": {"strategy": "bbkb", "mode": "async", "seed": 0}}).json()["id"]
                buffer = io.BytesIO()
                np.save(buffer, np.random.default_rng(0).random((n_candidates, dim)))
                began = time.perf_counter()
                http.put(f"/v1/studies/{sid}/candidates",
                         content=buffer.getvalue()).raise_for_status()
                print(f"A = {n_candidates}, d = {dim}: upload {time.perf_counter() - began:.1f} s")
                del buffer
                arms = np.random.default_rng(1).integers(n_candidates, size=100)
                began = time.perf_counter()
                http.post(f"/v1/studies/{sid}/observations", json={"observations": [
                    {"candidate": int(a), "value": float(a % 7)} for a in arms]}
                ).raise_for_status()
                print(f"  import 100 observations (engine built) "
                      f"{time.perf_counter() - began:.1f} s")
                path = f"/v1/studies/{sid}/trials"
                for params in ({"limit": 100}, {"limit": 100, "kind": "imported"},
                               {"limit": 100, "batch": 0}, {"limit": 10}):
                    print(f"  engine loaded: GET trials {params} median "
                          f"{_median_ms(http, path, params):8.1f} ms")
        finally:
            server.stop()
        server = ServerProcess(env).start()  # the same database, nothing loaded
        try:
            with httpx2.Client(base_url=server.url, timeout=1800) as http:
                for params in ({"limit": 100}, {"limit": 10}, {"limit": 1}):
                    print(f"  after restart: GET trials {params} median "
                          f"{_median_ms(http, path, params):8.1f} ms")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--candidates", type=int,
                        help="instead: an uploaded candidate matrix of this many rows")
    parser.add_argument("--dim", type=int, default=50, help="its columns (with --candidates)")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if args.candidates:
        run_upload(args.candidates, args.dim)
        return
    for n in args.sizes:
        run(n)


if __name__ == "__main__":
    main()
