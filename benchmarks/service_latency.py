"""Service latency and restart time, over real HTTP against a real server process.

1. Ask + tell round trip (``POST suggestions`` with count=1, then ``POST complete``) with a
   trivial objective, one server process on SQLite, for studies holding 10^3, 10^4 and 10^5
   trials (grown by a warm-start import, then 20 live round trips to warm up). Wall-clock p50 /
   p99 / mean of the round trip and of its ask and tell halves, and the server process's CPU
   milliseconds per round trip: on a shared machine the wall clock includes waiting for a core,
   the CPU time does not. CPU times are read from the process's CPU clock (clock_gettime,
   nanoseconds, all its threads; /proc/<pid>/stat counts 10 ms ticks).
2. Restart: a study with A = 10^5 candidates and 10^5 trials; the server is killed (SIGKILL)
   and started again; time until the first suggestion is served (process start + lazy rebuild),
   in wall seconds and in the new server process's CPU seconds.
3. Bulk results (``--bulk``): a lab's sheet of K results (K = 100, 1000, 10^4 trials asked in
   one call of an async study), uploaded as JSON (``POST .../results``) and as CSV
   (``.../results.csv``, the values filled into ``trial_id,value`` rows): wall milliseconds
   of the upload, the server's CPU milliseconds, and both per row. ``--sizes`` sets K.
The load average is printed with each figure: wall-clock numbers above ~2 (two cores) include
queueing behind other processes.

Bulk figures (2026-11-29, two runs of ``OPENBLAS_NUM_THREADS=1 nice -n 10 python
benchmarks/service_latency.py --bulk``, load 0.2-0.6), wall ms per upload, JSON / CSV: 10^4 rows
933-967 / 818-872 (82-97 us a row), 10^3 rows 74-76 / 150-174, 100 rows 16-17 / 14.

Usage: python benchmarks/service_latency.py [--quick] [--sizes 1000 10000 100000]
       [--round-trips 500] [--auth none|keys] [--no-restart] [--bulk]
``--quick`` (CI) sets only what the command line does not: sizes 1000 5000 (bulk: 100 1000), 100
round trips, a restart at 5,000 trials and candidates (else 10^5).
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

import httpx2
import numpy as np

from service.processes import ServerProcess

ENGINE = {"strategy": "bbkb", "mode": "async", "lam": 1.0, "explore": 0.3, "seed": 0,
          "kernel": {"name": "rbf", "lengthscale": 0.5}}


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a running process so far, every thread's (ended ones too), to the
    nanosecond: its CPU clock, the id glibc's clock_getcpuclockid(pid) gives on Linux.
    /proc/<pid>/stat counts clock ticks (10 ms), coarser than a 100-row upload."""
    return time.clock_gettime((~pid << 3) | 2)  # CPUCLOCK_SCHED of process pid


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def objective(x: np.ndarray) -> np.ndarray:
    """A smooth bump on [0, 1]^d (trivial to evaluate; its d_eff keeps the engine cheap)."""
    return np.exp(-np.sum((np.atleast_2d(x) - 0.6) ** 2, axis=1) / 0.2)


def create_study(http: httpx2.Client, name: str, candidates: np.ndarray) -> int:
    study = http.post("/v1/studies", json={"name": name, "upload": True, "engine": ENGINE})
    sid = study.json()["id"]
    buffer = io.BytesIO()
    np.save(buffer, candidates)
    r = http.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue())
    r.raise_for_status()
    return sid


def grow(http: httpx2.Client, sid: int, candidates: np.ndarray, n_trials: int,
         rng: np.random.Generator) -> None:
    """Import n_trials noisy observations in chunks (a warm start), as a lab would."""
    for start in range(0, n_trials, 20_000):
        size = min(20_000, n_trials - start)
        arms = rng.integers(len(candidates), size=size)
        values = objective(candidates[arms]) + 0.01 * rng.standard_normal(size)
        obs = [{"candidate": int(a), "value": float(v)}
               for a, v in zip(arms, values, strict=True)]
        http.post(f"/v1/studies/{sid}/observations", json={"observations": obs},
                  timeout=300).raise_for_status()


def round_trips(http: httpx2.Client, sid: int, candidates: np.ndarray, n: int) -> np.ndarray:
    """Wall seconds of n ask + tell round trips: columns (ask, tell)."""
    seconds = np.empty((n, 2))
    for i in range(n):
        start = time.perf_counter()
        (trial,) = http.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "bench", "count": 1}).json()["trials"]
        asked = time.perf_counter()
        value = float(objective(candidates[trial["candidate"]])[0])
        told = time.perf_counter()
        http.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                  json={"value": value}).raise_for_status()
        seconds[i] = asked - start, time.perf_counter() - told
    return seconds


def api_key(data_dir: str) -> str:
    """A key in a fresh database (what ``bbkb keys create`` does), for BBKB_AUTH=keys."""
    from service.auth import create_key
    from service.settings import Settings
    from service.store.database import make_engine, session_factory, transaction
    from service.store.migrate import ensure_schema

    engine = make_engine(str(Settings(data_dir=Path(data_dir)).database_url))
    ensure_schema(engine)
    with transaction(session_factory(engine)) as session:
        token = create_key(session, "bench")
    engine.dispose()
    return token


def latency(sizes: list[int], n: int, arms: int, auth: str = "none") -> None:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        headers = {"Authorization": f"Bearer {api_key(tmp)}"} if auth == "keys" else {}
        server = ServerProcess({"BBKB_DATA_DIR": tmp, "BBKB_AUTH": auth}).start()
        try:
            with httpx2.Client(base_url=server.url, timeout=120, headers=headers) as http:
                print(f"A={arms}, {n} round trips per size, auth {auth}; wall ms (round trip,"
                      f" then ask | tell p50), server CPU ms per round trip")
                print(f"{'trials':>8} {'p50':>7} {'p99':>7} {'mean':>7} {'ask50':>7} "
                      f"{'tell50':>7} {'cpu/rt':>7}")
                for i, size in enumerate(sizes):
                    X = rng.random((arms, 2))
                    sid = create_study(http, f"lat-{i}-{size}", X)
                    grow(http, sid, X, size, rng)
                    round_trips(http, sid, X, 20)  # warm-up: the first ask builds the engine
                    cpu = cpu_seconds(server.proc.pid)
                    ms = 1000 * round_trips(http, sid, X, n)
                    cpu_ms = 1000 * (cpu_seconds(server.proc.pid) - cpu) / n
                    rt = ms.sum(axis=1)
                    print(f"{size:>8} {np.percentile(rt, 50):7.2f} {np.percentile(rt, 99):7.2f}"
                          f" {rt.mean():7.2f} {np.median(ms[:, 0]):7.2f}"
                          f" {np.median(ms[:, 1]):7.2f} {cpu_ms:7.2f}  ({load()})", flush=True)
        finally:
            server.stop()


def restart(n_trials: int, arms: int) -> None:
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory() as tmp:
        env = {"BBKB_DATA_DIR": tmp, "BBKB_AUTH": "none"}
        server = ServerProcess(env).start()
        with httpx2.Client(base_url=server.url, timeout=600) as http:
            X = rng.random((arms, 2))
            sid = create_study(http, "restart", X)
            grow(http, sid, X, n_trials, rng)
            round_trips(http, sid, X, 50)
        server.kill()
        size = Path(tmp, "bbkb.db").stat().st_size / 1e6
        start = time.perf_counter()
        server = ServerProcess(env).start()
        ready, ready_cpu = time.perf_counter() - start, cpu_seconds(server.proc.pid)
        with httpx2.Client(base_url=server.url, timeout=600) as http:
            http.post(f"/v1/studies/{sid}/suggestions",
                      json={"worker_id": "bench", "count": 1}).raise_for_status()
        served, served_cpu = time.perf_counter() - start, cpu_seconds(server.proc.pid)
        server.stop()
    print(f"restart with A={arms}, {n_trials + 50} trials (database {size:.0f} MB): "
          f"process ready {ready:.2f} s ({ready_cpu:.2f} CPU s), first suggestion served "
          f"{served:.2f} s ({served_cpu:.2f} CPU s; rebuild {served - ready:.2f} s, "
          f"{served_cpu - ready_cpu:.2f} CPU s)  ({load()})")


def bulk(sheets: list[int], arms: int) -> None:
    rng = np.random.default_rng(2)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess({"BBKB_DATA_DIR": tmp, "BBKB_AUTH": "none"}).start()
        try:
            with httpx2.Client(base_url=server.url, timeout=600) as http:
                print(f"bulk results, A={arms}: wall and server CPU ms of one upload "
                      f"(per row in brackets)")
                for size in sheets:
                    for form in ("json", "csv"):
                        X = rng.random((arms, 2))
                        sid = create_study(http, f"bulk-{form}-{size}", X)
                        trials = http.post(f"/v1/studies/{sid}/suggestions", json={
                            "worker_id": "lab", "count": size}).json()["trials"]
                        values = objective(X[[t["candidate"] for t in trials]])
                        rows = [(t["id"], float(v)) for t, v in zip(trials, values, strict=True)]
                        if form == "json":
                            request = {"json": {"results": [{"trial_id": i, "value": v}
                                                            for i, v in rows]}}
                            path = "results"
                        else:
                            request = {"content": "trial_id,value\n" + "".join(
                                f"{i},{v!r}\n" for i, v in rows)}
                            path = "results.csv"
                        cpu, start = cpu_seconds(server.proc.pid), time.perf_counter()
                        answer = http.post(f"/v1/studies/{sid}/{path}", **request)
                        wall = 1000 * (time.perf_counter() - start)
                        cpu_ms = 1000 * (cpu_seconds(server.proc.pid) - cpu)
                        answer.raise_for_status()
                        assert answer.json()["completed"] == len(rows), answer.text
                        print(f"{len(rows):>7} rows {form:>4}: {wall:8.1f} ms "
                              f"({1000 * wall / len(rows):6.1f} us), CPU {cpu_ms:8.1f} ms "
                              f"({1000 * cpu_ms / len(rows):6.1f} us)  ({load()})", flush=True)
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (CI), where the command line gives none")
    parser.add_argument("--sizes", type=int, nargs="+",
                        help="trials per study (default 1000 10000 100000; --quick 1000 5000); "
                             "with --bulk rows per sheet (100 1000 10000; --quick 100 1000)")
    parser.add_argument("--round-trips", type=int, help="per size (default 500; --quick 100)")
    parser.add_argument("--auth", choices=["none", "keys"], default="none",
                        help="keys: every request authenticated with an API key (the default "
                             "deployment); none: the embedded single-user mode")
    parser.add_argument("--no-restart", action="store_true", help="round trips only")
    parser.add_argument("--bulk", action="store_true", help="bulk results uploads only")
    args = parser.parse_args()
    if args.bulk:
        if args.sizes is None:
            args.sizes = [100, 1000] if args.quick else [100, 1000, 10_000]
        bulk(args.sizes, 20_000)
        return
    if args.sizes is None:
        args.sizes = [1000, 5000] if args.quick else [1000, 10_000, 100_000]
    if args.round_trips is None:
        args.round_trips = 100 if args.quick else 500
    latency(args.sizes, args.round_trips, 2000, args.auth)
    if not args.no_restart:
        n = 5000 if args.quick else 100_000  # trials and candidates
        restart(n, n)


if __name__ == "__main__":
    main()
