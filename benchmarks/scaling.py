"""Scaling benchmark of the BBKB engine: resparsification, in-batch step, memory, GEMM floor.

For every number of candidates A and dictionary size m (d = 20 by default, Gaussian kernel,
candidates uniform in [0, 1]^d, dictionary drawn from a random history of pulled arms) a fresh
worker subprocess measures

1. the resparsification: construction of ``service.engine.nystrom.NystromPosterior`` over all A
   candidates (one pass in row blocks, 2 A m m' GEMM flops plus the kernel block, BBKB Appendix
   A.3), median and minimum wall time of several repeats. Each construction follows a measurement
   of this machine's float64 GEMM rate on its (block_rows x m) @ (m x m) product; the floor is
   2 A m^2 / that rate and t / floor is taken pair by pair (robust to slowly varying load). The
   same ratio in CPU seconds (user + sys of the construction, GEMM rate per CPU second) does not
   depend on how much of a shared core the process got;
2. the in-batch step: ``LazyUCB.select`` + ``NystromPosterior.add_pending``, median over
   ``--steps`` steps of one batch (non-constant mean from random observed data); the once-per-batch
   ``LazyUCB.start`` (bounds and sort, O(A log A)) is timed apart;
3. memory: ``ru_maxrss`` after the first construction minus the mark taken after the candidates
   were created (RSS delta), the ``tracemalloc`` peak of that construction (numpy reports its
   buffers), and the process peak RSS of a construction run while the previous posterior is still
   alive, as at a batch change in ``Strategy`` (the figure the 8 GB target is checked against).

It prints both tables with the load average of each configuration, fits log t = c + a log A +
b log m, checks the issue-2 targets (A = 1e6, d = 20, m = 256: under 10 s, under 8 GB, within 2x
of the floor) and saves ``benchmarks/results/scaling[_quick].json`` and ``.png``.

The workers inherit the environment: set OPENBLAS_NUM_THREADS=1 on a shared machine (or pass
--blas-threads); NUMPY_MADVISE_HUGEPAGE=0 shows the cost of numpy's transparent huge pages on the
first touch of the fresh A x m' array (the sys column). Usage::

    python benchmarks/scaling.py --quick          # < 60 s smoke run
    python benchmarks/scaling.py                  # full grid, A = 1e3..1e6, m = 64..512
    python benchmarks/scaling.py --arms 1e6 --dicts 256 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy
from quick import apply_quick

from service.engine.kernels import RBF
from service.engine.nystrom import NystromPosterior
from service.engine.selectors import LazyUCB

RESULTS = Path(__file__).resolve().parent / "results"
GB = 1e9
MEMORY_LIMIT = 12 * GB
TARGET = {"arms": 10**6, "m": 256, "seconds": 10.0, "bytes": 8 * GB, "floor_ratio": 2.0}


@dataclass
class Job:
    """One worker run: a single (A, m) configuration."""

    arms: int
    m: int
    d: int = 20
    lengthscale: float = 0.0  # 0: sqrt(d / 6), so that a typical k(x, x') is about exp(-1/2)
    lam: float = 1.0
    width: float = 5.0  # about C~ * beta with C~ = 2, F = 1, lam = 1 (the UCB width, BBKB Thm. 2)
    block_rows: int = 8192
    repeats: int = 3
    min_seconds: float = 2.0  # keep repeating cheap configurations up to this much time
    steps: int = 200
    pulled: int = 2000
    seed: int = 0
    blas_threads: int = 0  # 0: inherit the environment

    @property
    def scale(self) -> float:
        return self.lengthscale if self.lengthscale > 0 else math.sqrt(self.d / 6.0)


def objective(X: np.ndarray) -> np.ndarray:
    """A smooth test function on [0, 1]^d (so that the posterior mean is not constant)."""
    phase = np.linspace(0.0, np.pi, X.shape[1])
    return np.sin(3.0 * X + phase).sum(axis=1) / math.sqrt(X.shape[1])


def make_problem(job: Job) -> dict[str, Any]:
    """NystromPosterior arguments: random candidates, a random history, a dictionary drawn from
    the pulled arms (as in BBKB)."""
    rng = np.random.default_rng(job.seed)
    X = rng.random((job.arms, job.d))  # one allocation: no temporaries before the RSS baseline
    n_pulled = min(job.arms, max(job.pulled, 2 * job.m))
    pulled = np.sort(rng.choice(job.arms, size=n_pulled, replace=False))
    counts = rng.integers(1, 3, size=n_pulled)
    seen = np.sort(rng.choice(n_pulled, size=max(1, int(0.9 * n_pulled)), replace=False))
    values = objective(X[pulled[seen]])
    sums = counts[seen] * values + 0.01 * np.sqrt(counts[seen]) * rng.standard_normal(len(seen))
    return {"kernel": RBF(lengthscale=job.scale), "candidates": X,
            "dictionary": np.sort(rng.choice(pulled, size=job.m, replace=False)),
            "lam": job.lam, "block_rows": job.block_rows, "pulled_arms": pulled,
            "pulled_counts": counts, "observed_arms": pulled[seen],
            "observed_counts": counts[seen], "observed_sums": sums}


def maxrss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gemm_rate(rows: int, m: int, seconds: float = 0.15) -> tuple[float, float]:
    """float64 GEMM rate (flop/s) of (rows x m) @ (m x m), the shape of the embedding product:
    best over ``seconds`` per wall-clock second and per CPU second of this process."""
    rng = np.random.default_rng(1)
    left, right, out = rng.random((rows, m)), rng.random((m, m)), np.empty((rows, m))
    np.matmul(left, right, out=out)  # warm-up (threads, page faults)
    wall, cpu, spent = math.inf, math.inf, 0.0
    while spent < seconds:
        start, start_cpu = time.perf_counter(), time.process_time()
        np.matmul(left, right, out=out)
        elapsed = time.perf_counter() - start
        wall, spent = min(wall, elapsed), spent + elapsed
        cpu = min(cpu, time.process_time() - start_cpu)
    flops = 2.0 * rows * m * m
    return flops / wall, flops / max(cpu, 1e-9)


def measure_memory(problem: dict[str, Any]) -> tuple[dict[str, Any], NystromPosterior]:
    """First construction: ru_maxrss delta over the post-candidates baseline, tracemalloc peak."""
    baseline = maxrss_bytes()
    tracemalloc.start()
    posterior = NystromPosterior(**problem)
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"rss_delta_bytes": maxrss_bytes() - baseline, "tracemalloc_peak_bytes": traced,
            "dim": posterior.dim}, posterior


def time_construction(problem: dict[str, Any], job: Job,
                      workspace: np.ndarray | None) -> tuple[dict[str, Any], NystromPosterior]:
    """Timed constructions, each right after a GEMM-rate sample of the same machine load. Each
    writes into the previous one's buffer, as ``Strategy`` does from one batch to the next (the
    first touch of a fresh A x m' array is measured apart, by the memory run)."""
    rows = min(job.block_rows, job.arms)
    out: dict[str, list[float]] = {"seconds": [], "cpu_seconds": [], "sys_seconds": [],
                                   "gemm_flops": [], "gemm_cpu_flops": []}
    posterior: NystromPosterior | None = None
    while len(out["seconds"]) < job.repeats or (
            sum(out["seconds"]) < job.min_seconds and len(out["seconds"]) < 25):
        rate, cpu_rate = gemm_rate(rows, job.m)
        out["gemm_flops"].append(rate)
        out["gemm_cpu_flops"].append(cpu_rate)
        workspace = workspace if posterior is None else posterior.workspace
        posterior = None  # free the previous timed posterior before the next construction
        cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        posterior = NystromPosterior(**problem, workspace=workspace)
        out["seconds"].append(time.perf_counter() - wall)
        now = resource.getrusage(resource.RUSAGE_SELF)
        out["sys_seconds"].append(now.ru_stime - cpu.ru_stime)
        out["cpu_seconds"].append(now.ru_utime - cpu.ru_utime + out["sys_seconds"][-1])
    out["floor_seconds"] = [2.0 * job.arms * job.m**2 / r for r in out["gemm_flops"]]
    out["floor_ratio"] = [t / f for t, f in zip(out["seconds"], out["floor_seconds"], strict=True)]
    out["cpu_floor_ratio"] = [t * r / (2.0 * job.arms * job.m**2) for t, r in
                              zip(out["cpu_seconds"], out["gemm_cpu_flops"], strict=True)]
    assert posterior is not None
    return out, posterior


def time_steps(posterior: NystromPosterior, job: Job) -> dict[str, Any]:
    """One batch of ``job.steps`` in-batch steps: LazyUCB.select + add_pending, timed apart
    (per-step medians: robust to the preemptions of a shared machine; means in the JSON)."""
    selector, rng = LazyUCB(), np.random.default_rng(job.seed + 1)
    start = time.perf_counter()
    selector.start(posterior, job.width)
    opened = time.perf_counter() - start
    ticks = np.empty((job.steps, 3))
    for step in range(job.steps):
        ticks[step, 0] = time.perf_counter()
        arm = selector.select(rng)
        ticks[step, 1] = time.perf_counter()
        posterior.add_pending(arm)
        ticks[step, 2] = time.perf_counter()
    select, pend = ticks[:, 1] - ticks[:, 0], ticks[:, 2] - ticks[:, 1]
    return {"start_seconds": opened, "step_seconds": float(np.median(select + pend)),
            "select_seconds": float(np.median(select)),
            "add_pending_seconds": float(np.median(pend)),
            "step_mean_seconds": float(np.mean(select + pend)),
            "refreshed_per_step": selector.refreshed / job.steps,
            "mean_spread": float(np.ptp(posterior.mean))}


def run_worker(job: Job) -> dict[str, Any]:
    """Everything measured for one configuration (called in a fresh subprocess)."""
    info: dict[str, Any] = {"job": asdict(job), "load_before": os.getloadavg()}
    problem = make_problem(job)
    info["memory"], previous = measure_memory(problem)
    posterior = NystromPosterior(**problem)  # a batch change: the previous posterior is alive
    info["memory"]["rss_peak_with_previous_bytes"] = maxrss_bytes()
    workspace = previous.workspace
    del previous, posterior
    info["construction"], posterior = time_construction(problem, job, workspace)
    info["steps"] = time_steps(posterior, job)
    info["load_after"] = os.getloadavg()
    return info


# ----------------------------------------------------------------------------- driver
def estimate_bytes(arms: int, m: int, d: int) -> int:
    """Resident bytes of a configuration: candidates, two z' (A x m) alive, A-vectors."""
    return 8 * (arms * d + 2 * arms * m + 8 * arms)


def run_job(job: Job, timeout: float) -> dict[str, Any]:
    """Run one job in a fresh interpreter and parse the JSON on its last stdout line."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(asdict(job))]
    env = dict(os.environ)
    if job.blas_threads > 0:
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[name] = str(job.blas_threads)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"job": asdict(job), "error": f"timeout after {timeout:.0f} s"}
    if done.returncode != 0 or not done.stdout.strip():
        return {"job": asdict(job), "error": done.stderr.strip()[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def plan(args: argparse.Namespace) -> list[Job]:
    """Jobs of the grid, skipping configurations with m > A or above the memory limit."""
    jobs = []
    for arms in args.arms:
        for m in args.dicts:
            if m > arms or estimate_bytes(arms, m, args.d) > MEMORY_LIMIT:
                print(f"skip A={arms} m={m}: needs m <= A and < {MEMORY_LIMIT / GB:.0f} GB")
                continue
            jobs.append(Job(arms=arms, m=m, d=args.d, lengthscale=args.lengthscale, lam=args.lam,
                            width=args.width, block_rows=args.block_rows, repeats=args.repeats,
                            min_seconds=args.min_seconds, steps=args.steps, pulled=args.pulled,
                            seed=args.seed, blas_threads=args.blas_threads))
    return jobs


# ----------------------------------------------------------------------------- reporting
def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """One table row (medians, minima, ratios) from a worker's raw measurements."""
    job, con, mem, steps = result["job"], result["construction"], result["memory"], result["steps"]
    return {"A": job["arms"], "m": job["m"], "dim": mem["dim"],
            "t_med": float(np.median(con["seconds"])), "t_min": float(np.min(con["seconds"])),
            "cpu_med": float(np.median(con["cpu_seconds"])), "repeats": len(con["seconds"]),
            "sys_med": float(np.median(con["sys_seconds"])),
            "cpu_ratio": float(np.median(con["cpu_floor_ratio"])),
            "gflops": float(np.median(con["gemm_flops"])) / 1e9,
            "floor": float(np.median(con["floor_seconds"])),
            "ratio": float(np.median(con["floor_ratio"])),
            "ratio_best": float(np.min(con["seconds"]) / np.min(con["floor_seconds"])),
            "start_ms": 1e3 * steps["start_seconds"],
            "step_ms": 1e3 * steps["step_seconds"],
            "select_ms": 1e3 * steps["select_seconds"],
            "pending_ms": 1e3 * steps["add_pending_seconds"],
            "refreshed": steps["refreshed_per_step"],
            "rss_gb": mem["rss_delta_bytes"] / GB, "traced_gb": mem["tracemalloc_peak_bytes"] / GB,
            "rss_prev_gb": mem["rss_peak_with_previous_bytes"] / GB,
            "load": (result["load_before"][0] + result["load_after"][0]) / 2}


TIME_HEADER = ("      A    m   m'  t_med(s)  t_min(s)  cpu(s)  sys(s)  n  GF/s  floor(s) ratio "
               "best  cpu/fl load")
STEP_HEADER = ("      A    m | start(ms) step(ms) select   add refresh | RSSd(GB) traced "
               "+prev(GB) load")


def format_rows(r: dict[str, Any]) -> tuple[str, str]:
    """The resparsification line and the step / memory line of one configuration."""
    key = f"{r['A']:>7.0e} {r['m']:>4d}"
    timing = (f"{key} {r['dim']:>4d} {r['t_med']:>9.3f} {r['t_min']:>9.3f} {r['cpu_med']:>7.2f} "
              f"{r['sys_med']:>7.2f} {r['repeats']:>2d} {r['gflops']:>5.1f} {r['floor']:>9.4f} "
              f"{r['ratio']:>5.2f} {r['ratio_best']:>4.2f} {r['cpu_ratio']:>7.2f} "
              f"{r['load']:>4.1f}")
    steps = (f"{key} | {r['start_ms']:>9.2f} {r['step_ms']:>8.3f} {r['select_ms']:>6.3f} "
             f"{r['pending_ms']:>5.3f} {r['refreshed']:>7.1f} | {r['rss_gb']:>8.3f} "
             f"{r['traced_gb']:>6.3f} {r['rss_prev_gb']:>9.3f} {r['load']:>4.1f}")
    return timing, steps


def fit_exponents(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """log t = c + a log A + b log m by least squares, plus per-m slopes in A and per-A in m.

    A = 1e3 (fixed overheads dominate) is left out when at least two larger A were measured.
    """
    large = {r["A"] for r in rows if r["A"] >= 10**4}
    use = [r for r in rows if r["A"] >= 10**4] if len(large) >= 2 else rows
    out: dict[str, Any] = {"min_arms": min((r["A"] for r in use), default=0)}
    if len({r["A"] for r in use}) > 1 and len({r["m"] for r in use}) > 1:
        design = np.array([[1.0, math.log(r["A"]), math.log(r["m"])] for r in use])
        coef = np.linalg.lstsq(design, np.log([r[key] for r in use]), rcond=None)[0]
        out["joint"] = {"A": float(coef[1]), "m": float(coef[2])}
    for group, x in (("m", "A"), ("A", "m")):
        slopes = {}
        for value in sorted({r[group] for r in use}):
            sub = [r for r in use if r[group] == value]
            if len({r[x] for r in sub}) > 1:
                fit = np.polyfit(np.log([r[x] for r in sub]), np.log([r[key] for r in sub]), 1)
                slopes[f"{group}={value:.0e}" if group == "A" else f"{group}={value}"] = fit[0]
        out[f"slope_in_{x}"] = {k: float(v) for k, v in slopes.items()}
    return out


def print_fit(name: str, fit: dict[str, Any]) -> None:
    joint = fit.get("joint")
    text = f"t ~ A^{joint['A']:.2f} m^{joint['m']:.2f}" if joint else "joint fit: too few points"
    print(f"{name} (A >= {fit['min_arms']:.0e}): {text}")
    for x in ("A", "m"):
        slopes = ", ".join(f"{k}: {v:.2f}" for k, v in fit[f"slope_in_{x}"].items())
        print(f"    slope in {x}: {slopes or '-'}")


def check_targets(rows: list[dict[str, Any]], d: int) -> dict[str, Any]:
    """Issue 2's targets at A = 1e6, m = 256, d = 20: < 10 s, < 8 GB, within 2x of the floor."""
    hit = [r for r in rows if r["A"] == TARGET["arms"] and r["m"] == TARGET["m"]]
    if not hit or d != 20:
        return {"measured": False}
    r = hit[0]
    return {"measured": True, "seconds": r["t_med"], "seconds_ok": r["t_med"] < TARGET["seconds"],
            "peak_gb": r["rss_prev_gb"], "memory_ok": r["rss_prev_gb"] * GB < TARGET["bytes"],
            "floor_ratio": r["ratio"], "floor_ok": r["ratio"] <= TARGET["floor_ratio"],
            "load": r["load"]}


def print_targets(t: dict[str, Any]) -> None:
    if not t["measured"]:
        print("targets: A = 1e6, m = 256, d = 20 not in this run")
        return
    mark = {True: "MET", False: "NOT MET"}
    print(f"targets at A = 1e6, m = 256, d = 20 (load {t['load']:.1f}):")
    print(f"  time   {t['seconds']:8.2f} s  < 10 s         {mark[t['seconds_ok']]}")
    print(f"  memory {t['peak_gb']:8.2f} GB < 8 GB (process peak RSS, previous posterior alive)  "
          f"{mark[t['memory_ok']]}")
    print(f"  floor  {t['floor_ratio']:8.2f} x  <= 2x floor     {mark[t['floor_ok']]}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Log-log resparsification time (and floor) and in-batch step time versus A, per m."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, m in enumerate(sorted({r["m"] for r in rows})):
        sub = sorted((r for r in rows if r["m"] == m), key=lambda r: r["A"])
        arms, color = [r["A"] for r in sub], f"C{i}"
        left.loglog(arms, [r["t_med"] for r in sub], "o-", color=color, label=f"m={m}")
        left.loglog(arms, [r["floor"] for r in sub], "--", color=color, alpha=0.6)
        right.loglog(arms, [r["step_ms"] for r in sub], "o-", color=color, label=f"m={m}")
    left.axhline(TARGET["seconds"], color="grey", lw=0.8)
    left.set(xlabel="candidates A", ylabel="seconds",
             title="resparsification (o-) and floor 2Am^2 / GEMM rate (--)")
    right.set(xlabel="candidates A", ylabel="ms per step", title="in-batch step (select + add)")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine(args: argparse.Namespace) -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    threads = args.blas_threads or os.environ.get("OPENBLAS_NUM_THREADS", "default")
    return {"cpu": cpu, "cores": os.cpu_count(), "blas_threads": threads,
            "numpy": np.__version__, "scipy": scipy.__version__,
            "python": platform.python_version(), "load_at_start": os.getloadavg()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small grid, finishes in < 60 s")
    ap.add_argument("--arms", type=lambda s: int(float(s)), nargs="+",
                    default=[10**3, 10**4, 10**5, 10**6], help="numbers of candidates A")
    ap.add_argument("--dicts", type=int, nargs="+", default=[64, 128, 256, 512],
                    help="dictionary sizes m")
    ap.add_argument("--d", type=int, default=20, help="input dimension")
    ap.add_argument("--lengthscale", type=float, default=0.0, help="0: sqrt(d / 6)")
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--width", type=float, default=5.0, help="UCB width alpha")
    ap.add_argument("--block-rows", type=int, default=8192, help="the service's default")
    ap.add_argument("--repeats", type=int, default=3, help="timed constructions (at least)")
    ap.add_argument("--min-seconds", type=float, default=2.0,
                    help="repeat cheap configurations until this much time (max 25)")
    ap.add_argument("--steps", type=int, default=200, help="in-batch steps (median per step)")
    ap.add_argument("--pulled", type=int, default=2000, help="distinct pulled arms (>= 2m)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="OPENBLAS/OMP/MKL_NUM_THREADS of the workers (0: inherit)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per worker")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        apply_quick(ap, args, argv, arms=[10**3, 10**4], dicts=[64, 128], repeats=2,
                    min_seconds=0.5, steps=50)
    return args


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Print the tables, fits and targets; return the JSON summary."""
    for r in results:
        if "error" in r:
            print(f"FAILED A={r['job']['arms']} m={r['job']['m']}: {r['error']}")
    rows = [summarise(r) for r in results if "error" not in r]
    print(f"\nresparsification = NystromPosterior construction, d={args.d}, block_rows="
          f"{args.block_rows}; ratio = median over repeats of t / (2 A m^2 / GEMM rate measured "
          "just before), best = t_min / floor at the best rate; cpu = user + sys time of the "
          "process (all threads), sys = its kernel part (page faults), cpu/fl = "
          "the ratio in CPU seconds (construction and GEMM rate), robust to load; load = 1-min "
          "load average")
    print(TIME_HEADER)
    for row in rows:
        print(format_rows(row)[0])
    print(f"\nin-batch step, median of {args.steps} steps (start = LazyUCB.start once per batch, "
          "step = select + add_pending, refresh = UCBs recomputed per step) and memory (RSSd = "
          "ru_maxrss delta of the first construction, traced = its tracemalloc peak, +prev = "
          "process peak RSS of a construction with the previous posterior alive)")
    print(STEP_HEADER)
    for row in rows:
        print(format_rows(row)[1])
    fits = {"resparsification (median)": fit_exponents(rows, "t_med"),
            "resparsification (minimum)": fit_exponents(rows, "t_min"),
            "in-batch step": fit_exponents(rows, "step_ms")}
    print()
    for name, fit in fits.items():
        print_fit(name, fit)
    targets = check_targets(rows, args.d)
    print()
    print_targets(targets)
    return {"rows": rows, "fits": fits, "targets": targets}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(Job(**json.loads(args.worker)))))
        return
    started, info = time.perf_counter(), machine(args)
    print(f"{info['cpu']}, {info['cores']} cores, BLAS threads {info['blas_threads']}, numpy "
          f"{info['numpy']}, scipy {info['scipy']}, load {info['load_at_start'][0]:.2f}")
    results = []
    for job in plan(args):
        results.append(run_job(job, args.timeout))
        print(f"  done A={job.arms:.0e} m={job.m} ({time.perf_counter() - started:.0f} s)",
              flush=True)
    summary = report(results, args)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "scaling_quick" if args.quick else "scaling"
    if summary["rows"]:
        plot(summary["rows"], args.out / f"{stem}.png")
    info["load_at_end"], info["wall_seconds"] = os.getloadavg(), time.perf_counter() - started
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"machine": info, "args": {k: str(v) for k, v in vars(args).items()}, **summary,
         "raw": results}, indent=1))
    print(f"\nwrote {args.out / stem}.json and .png in {info['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()
