"""Scaling benchmark of the BBKB engine: resparsification, in-batch step, memory, GEMM floor.

For every number of candidates A and dictionary size m (d = 20 by default, Gaussian kernel,
candidates uniform in [0, 1]^d) a fresh worker subprocess measures

1. one resparsification, i.e. the construction of ``service.engine.nystrom.NystromPosterior``
   (embed all A candidates in row blocks, whiten, variances, means): median and minimum of
   several repeats, wall clock (and process CPU time in the JSON);
2. one in-batch step, ``LazyUCB.select`` + ``NystromPosterior.add_pending``, averaged over
   ``--steps`` steps with a non-constant mean (random observed data) and a plausible width;
3. peak memory of the resparsification: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of the
   worker after the first construction minus the same high-water mark taken right after the
   candidates were created (a fresh process per configuration, so the mark is not polluted by
   earlier configurations); the ``tracemalloc`` peak of the same construction (numpy reports its
   buffers to tracemalloc) is stored next to it as a cross-check;
4. the floor: this machine's float64 GEMM rate on (block_rows x m) @ (m x m') products, measured
   right before every timed construction, and 2 A m^2 / rate next to the measured time.

Machines shared with other jobs make timings noisy: each timed construction is paired with a GEMM
rate measured right before it (the ratio of each pair is robust to slowly varying load), medians
and minima are both stored, and the load average is recorded. Rerun on a quiet machine to get
clean numbers.

``--profile`` additionally times the phases of a standalone copy of the current construction and
compares it, interleaved on the same problem, with a proposed formulation (one GEMM that embeds
and whitens at once in the eigenbasis of V_all, with an in-place RBF block) and checks that both
give the same posterior.

Usage::

    python benchmarks/scaling.py --quick          # < 60 s smoke run
    python benchmarks/scaling.py                  # full grid, A = 1e3..1e6, m = 64..512
    python benchmarks/scaling.py --arms 1e6 --dicts 256 --repeats 5

Outputs ``benchmarks/results/scaling[_quick].json`` and ``.png`` (log-log time versus A per m).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy
from scipy import linalg

from service.engine import Strategy
from service.engine.kernels import RBF
from service.engine.nystrom import Embedding, NystromPosterior, _cholesky, _gram
from service.engine.selectors import LazyUCB

RESULTS = Path(__file__).resolve().parent / "results"
GB = 1e9
MEMORY_LIMIT = 12 * GB
TARGET = {"arms": 10**6, "m": 256, "d": 20, "seconds": 10.0, "bytes": 8 * GB, "floor_ratio": 2.0}
SWEEP_BLOCKS = (2048, 4096, 8192, 16384, 32768)
Phases = dict[str, float]


@dataclass
class Job:
    """One worker run: a single (A, m) configuration."""

    arms: int
    m: int
    d: int = 20
    lengthscale: float = 0.0  # 0: sqrt(d / 6), so that a typical k(x, x') is about exp(-1/2)
    lam: float = 1.0
    width: float = 5.0  # about C~ * beta with C~ = 2, F = 1, lam = 1 (ENGINE.md, UCB width)
    block_rows: int = 8192
    repeats: int = 3
    min_seconds: float = 2.0  # keep repeating cheap configurations up to this much time
    steps: int = 200
    pulled: int = 2000
    seed: int = 0
    profile: bool = False
    sweep: bool = False
    kind: str = "scaling"
    blas_threads: int = 0  # 0: the BLAS default (all cores)

    @property
    def scale(self) -> float:
        return self.lengthscale if self.lengthscale > 0 else math.sqrt(self.d / 6.0)


@dataclass
class Problem:
    """Candidates, kernel, dictionary and a random history of pulled / observed arms."""

    candidates: np.ndarray
    kernel: RBF
    dictionary: np.ndarray
    pulled_arms: np.ndarray
    pulled_counts: np.ndarray
    observed_arms: np.ndarray
    observed_counts: np.ndarray
    observed_sums: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)

    def history(self) -> dict[str, np.ndarray]:
        return {"pulled_arms": self.pulled_arms, "pulled_counts": self.pulled_counts,
                "observed_arms": self.observed_arms, "observed_counts": self.observed_counts,
                "observed_sums": self.observed_sums}


def objective(X: np.ndarray) -> np.ndarray:
    """A smooth test function on [0, 1]^d (so that the posterior mean is not constant)."""
    phase = np.linspace(0.0, np.pi, X.shape[1])
    return np.sin(3.0 * X + phase).sum(axis=1) / math.sqrt(X.shape[1])


def make_problem(job: Job) -> Problem:
    """Random candidates and history; the dictionary is drawn from the pulled arms, as in BBKB."""
    rng = np.random.default_rng(job.seed)
    X = rng.random((job.arms, job.d))  # one allocation: no temporaries before the RSS baseline
    n_pulled = min(job.arms, max(job.pulled, 2 * job.m))
    pulled = np.sort(rng.choice(job.arms, size=n_pulled, replace=False))
    counts = rng.integers(1, 3, size=n_pulled)
    seen = np.sort(rng.choice(n_pulled, size=max(1, int(0.9 * n_pulled)), replace=False))
    values = objective(X[pulled[seen]])
    sums = counts[seen] * values + 0.01 * np.sqrt(counts[seen]) * rng.standard_normal(len(seen))
    dictionary = np.sort(rng.choice(pulled, size=job.m, replace=False))
    return Problem(X, RBF(lengthscale=job.scale), dictionary, pulled, counts, pulled[seen],
                   counts[seen], sums)


def build_current(problem: Problem, job: Job, block_rows: int | None = None) -> NystromPosterior:
    """The service's resparsification: construct the batch posterior over all candidates."""
    return NystromPosterior(problem.kernel, problem.candidates, problem.dictionary, lam=job.lam,
                            block_rows=block_rows or job.block_rows, **problem.history())


def maxrss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gemm_rate(rows: int, m: int, dim: int, seconds: float = 0.15) -> float:
    """float64 GEMM rate (flop/s) of (rows x m) @ (m x dim), the shape of the embedding product."""
    rng = np.random.default_rng(1)
    left, right = rng.random((rows, m)), rng.random((m, dim))
    out = np.empty((rows, dim))
    np.matmul(left, right, out=out)  # warm-up (threads, page faults)
    best, spent = math.inf, 0.0
    while spent < seconds or best == math.inf:
        start = time.perf_counter()
        np.matmul(left, right, out=out)
        elapsed = time.perf_counter() - start
        best, spent = min(best, elapsed), spent + elapsed
    return 2.0 * rows * m * dim / best


def time_construction(problem: Problem, job: Job, held: NystromPosterior) -> dict[str, Any]:
    """Timed constructions (service, then the proposed fused version), each pair right after a
    GEMM-rate sample, so that the pair and its floor share the machine's load.

    The first service construction runs while ``held`` (the posterior of :func:`measure_memory`)
    is still alive, as ``Strategy._install_batch`` does, and records the peak RSS of that case.
    """
    rows = min(job.block_rows, job.arms)
    out: dict[str, list[float]] = {"seconds": [], "cpu_seconds": [], "gemm_flops": [],
                                   "fused_seconds": []}
    posterior, held_peak = None, 0
    while len(out["seconds"]) < job.repeats or (
            sum(out["seconds"]) < job.min_seconds and len(out["seconds"]) < 25):
        out["gemm_flops"].append(gemm_rate(rows, job.m, job.m))
        posterior = None  # free the previous timed posterior before the next construction
        cpu, wall = time.process_time(), time.perf_counter()
        posterior = build_current(problem, job)
        out["seconds"].append(time.perf_counter() - wall)
        out["cpu_seconds"].append(time.process_time() - cpu)
        if held is not None:
            held, held_peak = None, maxrss_bytes()
        wall = time.perf_counter()
        fused_phases(problem, job, job.block_rows, {})
        out["fused_seconds"].append(time.perf_counter() - wall)
    floor = [2.0 * job.arms * job.m**2 / r for r in out["gemm_flops"]]
    problem.extra["posterior"] = posterior
    return {**out, "floor_seconds": floor,
            "floor_ratio": [w / f for w, f in zip(out["seconds"], floor, strict=True)],
            "fused_floor_ratio": [w / f for w, f in zip(out["fused_seconds"], floor, strict=True)],
            "rss_peak_with_previous_bytes": held_peak}


def measure_memory(problem: Problem, job: Job) -> tuple[dict[str, Any], NystromPosterior]:
    """First construction: ru_maxrss delta over the post-candidates baseline, tracemalloc peak."""
    baseline = maxrss_bytes()
    tracemalloc.start()
    posterior = build_current(problem, job)
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak = maxrss_bytes()
    return {"rss_baseline_bytes": baseline, "rss_peak_bytes": peak,
            "rss_delta_bytes": peak - baseline, "tracemalloc_peak_bytes": traced,
            "dim": posterior.dim, "whitened_bytes": posterior.whitened.nbytes}, posterior


def first_touch_seconds(shape: tuple[int, int]) -> float:
    """Allocate and fill a fresh float64 array (page-fault cost of a new z' matrix here)."""
    start = time.perf_counter()
    array = np.empty(shape)
    array.fill(0.0)
    elapsed = time.perf_counter() - start
    del array
    return elapsed


class SortedLazyUCB(LazyUCB):
    """Prototype (not in the service): LazyUCB without O(A) work per step.

    Never-refreshed arms keep their start-of-batch bound, so one argsort at batch start orders
    them for the whole batch; only the (few) refreshed arms need a partial sort at each step.
    Returns the same exact argmax as :class:`LazyUCB`.
    """

    def start(self, posterior: NystromPosterior, width: float) -> None:
        super().start(posterior, width)
        self.order = np.argsort(-self.bound, kind="stable")
        self.next = 0  # self.order[self.next:] have never been refreshed
        self.touched = np.zeros(0, dtype=np.int64)

    def select(self, rng: np.random.Generator) -> int:
        k, A = self.first_block, len(self.bound)
        while True:
            fresh = self.order[self.next : self.next + k]
            self.next += len(fresh)
            old = self.touched
            if len(old) > k:
                old = old[np.argpartition(-self.bound[old], k - 1)[:k]]
            top = np.concatenate([old, fresh])
            self.bound[top] = self.ucb(top)
            self.refreshed += len(top)
            self.touched = np.concatenate([self.touched, fresh])
            best = int(self.touched[np.argmax(self.bound[self.touched])])
            stale = self.bound[self.order[self.next]] if self.next < A else -np.inf
            if self.bound[best] >= stale and np.any(top == best):
                return best
            k = min(4 * k, A)


def time_steps(posterior: NystromPosterior, job: Job,
               selector: LazyUCB | None = None) -> dict[str, Any]:
    """In-batch steps: ``selector.select`` + ``add_pending``, timed separately and together."""
    selector, rng = selector or LazyUCB(), np.random.default_rng(job.seed + 1)
    posterior._ginv = np.eye(posterior.dim)  # benchmark-only reset: no pending points yet
    start = time.perf_counter()
    selector.start(posterior, job.width)
    opened = time.perf_counter() - start
    select = pend = 0.0
    arms = []
    for _ in range(job.steps):
        t0 = time.perf_counter()
        arms.append(selector.select(rng))
        t1 = time.perf_counter()
        posterior.add_pending(arms[-1])
        t2 = time.perf_counter()
        select, pend = select + (t1 - t0), pend + (t2 - t1)
    return {"start_seconds": opened, "step_seconds": (select + pend) / job.steps,
            "select_seconds": select / job.steps, "add_pending_seconds": pend / job.steps,
            "refreshed_per_step": selector.refreshed / job.steps,
            "mean_spread": float(np.ptp(posterior.mean)), "arms": arms}


def compare_selectors(posterior: NystromPosterior, job: Job) -> dict[str, Any]:
    """The service's LazyUCB and the SortedLazyUCB prototype on the same posterior."""
    current = time_steps(posterior, job)
    proposed = time_steps(posterior, job, SortedLazyUCB())
    proposed["same_arms"] = current["arms"] == proposed["arms"]
    current.pop("arms")
    proposed.pop("arms")
    return {**current, "sorted_prototype": proposed}


# ----------------------------------------------------------------------------- profiling
@contextlib.contextmanager
def phase(phases: Phases, name: str) -> Iterator[None]:
    """Accumulate the wall time of a block into ``phases[name]``."""
    start = time.perf_counter()
    yield
    phases[name] = phases.get(name, 0.0) + time.perf_counter() - start


def _setup(problem: Problem, job: Job) -> tuple[Embedding, np.ndarray, np.ndarray, np.ndarray]:
    """Embedding, V_all, Cholesky of V_obs and V_obs^-1 b (identical in both versions)."""
    X, embed = problem.candidates, Embedding(problem.kernel, problem.candidates[problem.dictionary])
    V = _gram(embed(X[problem.pulled_arms]), problem.pulled_counts.astype(float), job.lam)
    Zo = embed(X[problem.observed_arms])
    Lo = _cholesky(_gram(Zo, problem.observed_counts.astype(float), job.lam), "V_obs")
    return embed, V, Lo, linalg.cho_solve((Lo, True), Zo.T @ problem.observed_sums)


def current_phases(problem: Problem, job: Job, block_rows: int, phases: Phases) -> dict:
    """Standalone copy of ``NystromPosterior.__init__`` with a timer around every phase."""
    X, kernel, lam = problem.candidates, problem.kernel, job.lam
    with phase(phases, "setup (eigh K_S, V_all, V_obs)"):
        embed, V, _, w = _setup(problem, job)
        L = _cholesky(V, "V_all")
    A, dim, points = len(X), embed.dim, embed.points
    whitened, residual = np.empty((A, dim)), np.empty(A)
    for start in range(0, A, block_rows):
        rows = slice(start, min(start + block_rows, A))
        with phase(phases, "kernel block k(X_b, S)"):
            K = kernel(X[rows], points)
        with phase(phases, "transform GEMM K @ T"):
            Z = K @ embed.transform
        with phase(phases, "residual einsum"):
            residual[rows] = kernel.diag(X[rows]) - np.einsum("ij,ij->i", Z, Z)
        with phase(phases, "solve_triangular L^-1 Z^T"):
            solved = linalg.solve_triangular(L, Z.T, lower=True, check_finite=False)
        with phase(phases, "store (transpose copy)"):
            whitened[rows] = solved.T
    with phase(phases, "variance + mean (full passes)"):
        np.maximum(residual, 0.0, out=residual)
        variance = residual / lam + np.einsum("ij,ij->i", whitened, whitened)
        mean = whitened @ (L.T @ w)
    return {"whitened": whitened, "residual": residual, "variance": variance, "mean": mean,
            "unwhiten": L.T @ L}


def _rbf_block(Xb: np.ndarray, scaled_points_t: np.ndarray, half_sq_points: np.ndarray,
               gamma: float, out: np.ndarray) -> np.ndarray:
    """exp(-||x - s||^2 / (2 l^2)) (unit variance) written in place into ``out``."""
    np.matmul(Xb, scaled_points_t, out=out)  # gamma * x.s
    out -= (0.5 * gamma) * np.einsum("ij,ij->i", Xb, Xb)[:, None]
    out -= half_sq_points
    np.minimum(out, 0.0, out=out)  # the clip of d2 at 0
    return np.exp(out, out=out)


def fused_phases(problem: Problem, job: Job, block_rows: int, phases: Phases,
                 inplace_kernel: bool = True, out: np.ndarray | None = None) -> dict:
    """Proposed construction: V_all = Q diag(v) Q^T, z'' = diag(v)^-1/2 Q^T z = W^T k_S(x).

    One GEMM per block embeds and whitens at once (W = T Q diag(v)^-1/2 replaces GEMM + TRSM),
    ||z''||^2 and ||z||^2 = sum v z''^2 come from one small GEMM of z''^2 against [1, v], and the
    mean from a GEMV, all while the block is in cache; no full-size temporaries. ``out``: an
    (A, m') buffer to overwrite (the previous batch's z''), which avoids fresh page faults.
    """
    X, kernel, lam = problem.candidates, problem.kernel, job.lam
    with phase(phases, "setup (eigh K_S, V_all, V_obs)"):
        embed, V, _, w = _setup(problem, job)
        v, Q = linalg.eigh(V)
        W = (embed.transform @ Q) / np.sqrt(v)
        c, pair = np.sqrt(v) * (Q.T @ w), np.stack([np.ones_like(v), v], axis=1)
        points = embed.points
        gamma = 1.0 / kernel.lengthscale**2
        scaled_t, half_sq = np.ascontiguousarray(points.T * gamma), 0.5 * gamma * (points**2).sum(1)
        W_k = W * kernel.variance if inplace_kernel else W
    A, dim = len(X), W.shape[1]
    whitened = out if out is not None and out.shape == (A, dim) else np.empty((A, dim))
    residual, variance, mean = np.empty(A), np.empty(A), np.empty(A)
    rows_max = min(block_rows, A)
    K_buf, sq_buf, norms_buf = np.empty((rows_max, len(points))), np.empty((rows_max, dim)), \
        np.empty((rows_max, 2))
    for start in range(0, A, block_rows):
        rows, n = slice(start, min(start + block_rows, A)), min(block_rows, A - start)
        with phase(phases, "kernel block k(X_b, S)"):
            K = (_rbf_block(X[rows], scaled_t, half_sq, gamma, K_buf[:n]) if inplace_kernel
                 else kernel(X[rows], points))
        with phase(phases, "fused GEMM K @ W (into output)"):
            Zb = np.matmul(K, W_k, out=whitened[rows])
        with phase(phases, "norms + mean (in block)"):
            sq, norms = np.multiply(Zb, Zb, out=sq_buf[:n]), norms_buf[:n]
            np.matmul(sq, pair, out=norms)
            np.maximum(kernel.diag(X[rows]) - norms[:, 1], 0.0, out=residual[rows])
            np.add(residual[rows] / lam, norms[:, 0], out=variance[rows])
            np.matmul(Zb, c, out=mean[rows])
    return {"whitened": whitened, "residual": residual, "variance": variance, "mean": mean,
            "unwhiten": np.diag(v)}


def check_equivalent(ref: NystromPosterior, new: dict, seed: int) -> dict[str, float]:
    """Max abs differences: residual, variance, mean, Gram of z', in-batch variance, k~_start."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(ref.mean), size=min(200, len(ref.mean)), replace=False)
    pend = idx[:5]
    Zn = new["whitened"]
    G = np.eye(Zn.shape[1]) + Zn[pend].T @ Zn[pend]
    in_batch = new["residual"][idx] / ref.lam + np.einsum(
        "ij,ji->i", Zn[idx], np.linalg.solve(G, Zn[idx].T))
    cov_new = Zn[idx] @ (Zn[pend[0]] - new["unwhiten"] @ Zn[pend[0]] / ref.lam)
    cov_ref = ref.whitened[idx] @ (ref.whitened[pend[0]] - ref._chol.T @ (
        ref._chol @ ref.whitened[pend[0]]) / ref.lam)
    for arm in pend:
        ref.add_pending(int(arm))
    gram = np.abs(ref.whitened[idx] @ ref.whitened[idx].T - Zn[idx] @ Zn[idx].T).max()
    return {"residual": float(np.abs(ref.residual - new["residual"]).max()),
            "variance_start": float(np.abs(ref.variance_start - new["variance"]).max()),
            "mean": float(np.abs(ref.mean - new["mean"]).max()), "gram_z": float(gram),
            "in_batch_variance": float(np.abs(ref.variance(idx) - in_batch).max()),
            "covariance_start_span": float(np.abs(cov_ref - cov_new).max())}


def _variants(problem: Problem, job: Job) -> dict[str, Callable[[Phases, int], Any]]:
    buffer = np.empty((job.arms, problem.extra["dim"]))
    return {
        "service NystromPosterior": lambda ph, b: build_current(problem, job, b),
        "current (standalone copy)": lambda ph, b: current_phases(problem, job, b, ph),
        "fused whitening": lambda ph, b: fused_phases(problem, job, b, ph, inplace_kernel=False),
        "fused + in-place RBF": lambda ph, b: fused_phases(problem, job, b, ph),
        "fused + RBF, reused buffer": lambda ph, b: fused_phases(problem, job, b, ph, out=buffer),
    }


def profile(problem: Problem, job: Job) -> dict[str, Any]:
    """Interleaved timings and phase breakdowns of the current and the proposed constructions."""
    variants = _variants(problem, job)
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    phases: dict[str, Phases] = {name: {} for name in names}
    rates = []
    for rep in range(job.repeats):
        rates.append(gemm_rate(min(job.block_rows, job.arms), job.m, job.m))
        for name in names[rep % len(names):] + names[:rep % len(names)]:  # rotate the order
            start = time.perf_counter()
            out = variants[name](phases[name], job.block_rows)
            times[name].append(time.perf_counter() - start)
            del out
    errors = {name: check_equivalent(build_current(problem, job),
                                     variants[name]({}, job.block_rows), job.seed)
              for name in names[2:4]}
    tracemalloc.start()
    variants["fused + in-place RBF"]({}, job.block_rows)
    fused_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"seconds": times, "gemm_flops": rates,
            "phases": {n: {k: v / job.repeats for k, v in p.items()} for n, p in phases.items()},
            "max_abs_error": errors, "fused_tracemalloc_peak_bytes": fused_peak}


def block_sweep(problem: Problem, job: Job, repeats: int = 2) -> dict[str, dict[int, float]]:
    """Best-of-``repeats`` time of the service and of the fused version per block size."""
    variants = _variants(problem, job)
    out: dict[str, dict[int, float]] = {"service NystromPosterior": {}, "fused + in-place RBF": {}}
    for rows in SWEEP_BLOCKS:
        for name, best in out.items():
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                variants[name]({}, rows)
                samples.append(time.perf_counter() - start)
            best[rows] = min(samples)
    return out


def run_e2e(job: Job) -> dict[str, Any]:
    """Whole-strategy API: ask_batch / tell on a random problem until job.steps evaluations."""
    rng = np.random.default_rng(job.seed)
    X = rng.random((job.arms, job.d))
    f = objective(X)
    strategy = Strategy(X, strategy="bbkb", kernel={"name": "rbf", "lengthscale": job.scale},
                        lam=job.lam, seed=job.seed)
    start = time.perf_counter()
    while strategy.t < job.steps:
        for selection in strategy.ask_batch():
            strategy.tell(selection.t, float(f[selection.arm] + 0.01 * rng.standard_normal()))
    total = time.perf_counter() - start
    opens = [b.open_seconds for b in strategy.batches]
    return {"total_seconds": total, "evaluations": strategy.t, "batches": len(strategy.batches),
            "open_seconds_total": float(np.nansum(opens)),
            "open_seconds_max": float(np.nanmax(opens)),
            "dictionary_size_last": strategy.batches[-1].dictionary_size,
            "dictionary_size_max": max(b.dictionary_size for b in strategy.batches),
            "best_found": float(f[strategy.records["arm"]].max()), "best_possible": float(f.max())}


def run_worker(job: Job) -> dict[str, Any]:
    """Everything measured for one configuration (called in a fresh subprocess)."""
    info: dict[str, Any] = {"job": asdict(job), "load_before": os.getloadavg()}
    if job.kind == "e2e":
        info["e2e"] = run_e2e(job)
    else:
        problem = make_problem(job)
        info["memory"], held = measure_memory(problem, job)
        problem.extra["dim"] = held.dim
        info["construction"] = time_construction(problem, job, held)
        del held
        info["steps"] = compare_selectors(problem.extra.pop("posterior"), job)
        info["first_touch_seconds"] = first_touch_seconds((job.arms, info["memory"]["dim"]))
        if job.profile:
            info["profile"] = profile(problem, job)
        if job.sweep:
            info["sweep"] = block_sweep(problem, job)
    info["load_after"] = os.getloadavg()
    return info


# ----------------------------------------------------------------------------- driver
def estimate_bytes(arms: int, m: int, d: int, block_rows: int) -> int:
    """Resident bytes a configuration needs: candidates, z' (A x m), A-vectors, block buffers."""
    return 8 * (arms * d + arms * m + 5 * arms + 6 * min(block_rows, arms) * m)


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
    """Scaling jobs of the grid, skipping configurations that need more than the memory limit."""
    jobs = []
    target = (max(args.arms), 256 if 256 in args.dicts else max(args.dicts))
    for arms in args.arms:
        for m in args.dicts:
            if m > arms or estimate_bytes(arms, m, args.d, args.block_rows) > MEMORY_LIMIT:
                print(f"skip A={arms} m={m}: needs m <= A and < {MEMORY_LIMIT / GB:.0f} GB")
                continue
            chosen = args.profile == "all" or (args.profile == "target" and (arms, m) == target)
            jobs.append(Job(arms=arms, m=m, d=args.d, lengthscale=args.lengthscale,
                            lam=args.lam, width=args.width, block_rows=args.block_rows,
                            repeats=args.repeats, min_seconds=args.min_seconds,
                            steps=args.steps, pulled=args.pulled, seed=args.seed,
                            profile=chosen, sweep=chosen and args.sweep,
                            blas_threads=args.blas_threads))
    return jobs


# ----------------------------------------------------------------------------- reporting
def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """One table row (medians, minima, ratios) from a worker's raw measurements."""
    job, con, mem, steps = result["job"], result["construction"], result["memory"], result["steps"]
    proto = steps["sorted_prototype"]
    return {"A": job["arms"], "m": job["m"], "dim": mem["dim"],
            "t_med": float(np.median(con["seconds"])), "t_min": float(np.min(con["seconds"])),
            "cpu_med": float(np.median(con["cpu_seconds"])), "repeats": len(con["seconds"]),
            "gflops": float(np.median(con["gemm_flops"])) / 1e9,
            "floor": float(np.median(con["floor_seconds"])),
            "ratio": float(np.median(con["floor_ratio"])),
            "ratio_best": float(np.min(con["seconds"]) / np.min(con["floor_seconds"])),
            "f_med": float(np.median(con["fused_seconds"])),
            "f_min": float(np.min(con["fused_seconds"])),
            "f_ratio": float(np.median(con["fused_floor_ratio"])),
            "speedup": float(np.median(np.divide(con["seconds"], con["fused_seconds"]))),
            "step_ms": 1e3 * steps["step_seconds"], "select_ms": 1e3 * steps["select_seconds"],
            "pending_ms": 1e3 * steps["add_pending_seconds"],
            "refreshed": steps["refreshed_per_step"], "sorted_step_ms": 1e3 * proto["step_seconds"],
            "same_arms": proto["same_arms"], "rss_gb": mem["rss_delta_bytes"] / GB,
            "rss_total_gb": mem["rss_peak_bytes"] / GB,
            "rss_held_gb": con["rss_peak_with_previous_bytes"] / GB,
            "traced_gb": mem["tracemalloc_peak_bytes"] / GB,
            "touch_s": result["first_touch_seconds"],
            "load": (result["load_before"][0] + result["load_after"][0]) / 2}


TIME_HEADER = ("      A    m   m'  t_med(s)  t_min(s)  cpu(s) n  GF/s  floor(s) ratio best | "
               "fused_med fused_min ratio speedup")
STEP_HEADER = ("      A    m | step(ms) select   add refresh sorted* same | RSSd(GB) RSS(GB) "
               "+prev(GB) traced touch(s) load")


def format_rows(r: dict[str, Any]) -> tuple[str, str]:
    """The resparsification line and the step / memory line of one configuration."""
    key = f"{r['A']:>7.0e} {r['m']:>4d}"
    timing = (f"{key} {r['dim']:>4d} {r['t_med']:>9.3f} {r['t_min']:>9.3f} {r['cpu_med']:>7.2f} "
              f"{r['repeats']:>2d} {r['gflops']:>5.1f} {r['floor']:>9.3f} {r['ratio']:>5.1f} "
              f"{r['ratio_best']:>4.1f} | {r['f_med']:>9.3f} {r['f_min']:>9.3f} "
              f"{r['f_ratio']:>5.1f} {r['speedup']:>7.2f}")
    steps = (f"{key} | {r['step_ms']:>8.3f} {r['select_ms']:>6.3f} {r['pending_ms']:>5.3f} "
             f"{r['refreshed']:>7.1f} {r['sorted_step_ms']:>7.3f} {str(r['same_arms'])[0]:>4} | "
             f"{r['rss_gb']:>8.3f} {r['rss_total_gb']:>7.3f} {r['rss_held_gb']:>9.3f} "
             f"{r['traced_gb']:>6.3f} {r['touch_s']:>8.2f} {r['load']:>4.1f}")
    return timing, steps


def fit_exponents(rows: list[dict[str, Any]], key: str, min_arms: int) -> dict[str, Any]:
    """log t = c + a log A + b log m by least squares, plus per-m slopes in A, per-A in m."""
    use = [r for r in rows if r["A"] >= min_arms]
    out: dict[str, Any] = {"min_arms": min_arms, "points": len(use)}
    if len(use) >= 3 and len({r["A"] for r in use}) > 1 and len({r["m"] for r in use}) > 1:
        design = np.array([[1.0, math.log(r["A"]), math.log(r["m"])] for r in use])
        coef = np.linalg.lstsq(design, np.log([r[key] for r in use]), rcond=None)[0]
        out["joint"] = {"A": float(coef[1]), "m": float(coef[2])}
    out["per_m_slope_in_A"] = _slopes(use, "m", "A", key)
    out["per_A_slope_in_m"] = _slopes(use, "A", "m", key)
    return out


def _slopes(rows: list[dict[str, Any]], group: str, x: str, key: str) -> dict[str, float]:
    slopes = {}
    for value in sorted({r[group] for r in rows}):
        sub = [r for r in rows if r[group] == value]
        if len({r[x] for r in sub}) > 1:
            fit = np.polyfit(np.log([r[x] for r in sub]), np.log([r[key] for r in sub]), 1)
            slopes[str(value)] = float(fit[0])
    return slopes


def print_fit(name: str, fit: dict[str, Any]) -> None:
    joint = fit.get("joint")
    text = f"t ~ A^{joint['A']:.2f} m^{joint['m']:.2f}" if joint else "joint fit: too few points"
    per_m = ", ".join(f"m={k}: {v:.2f}" for k, v in fit["per_m_slope_in_A"].items())
    per_a = ", ".join(f"A={float(k):.0e}: {v:.2f}" for k, v in fit["per_A_slope_in_m"].items())
    print(f"{name} (A >= {fit['min_arms']:.0e}): {text}")
    print(f"    slope in A per m: {per_m or '-'}")
    print(f"    slope in m per A: {per_a or '-'}")


def check_targets(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets at A = 1e6, m = 256 (d = 20): < 10 s, < 8 GB, within 2x of floor."""
    hit = [r for r in rows if r["A"] == TARGET["arms"] and r["m"] == TARGET["m"]]
    if not hit:
        return {"measured": False}
    r = hit[0]
    return {"measured": True, "seconds": r["t_med"], "seconds_ok": r["t_med"] < TARGET["seconds"],
            "rss_total_gb": r["rss_total_gb"],
            "memory_ok": r["rss_total_gb"] * GB < TARGET["bytes"],
            "floor_ratio": r["ratio"], "floor_ok": r["ratio"] <= TARGET["floor_ratio"]}


def print_targets(targets: dict[str, Any], d: int) -> None:
    if not targets["measured"]:
        print("targets: A = 1e6, m = 256 not in this run")
        return
    mark = {True: "MET", False: "NOT MET"}
    print(f"targets at A = 1e6, m = 256, d = {d}:")
    print(f"  time   {targets['seconds']:8.2f} s  < 10 s        {mark[targets['seconds_ok']]}")
    print(f"  memory {targets['rss_total_gb']:8.2f} GB < 8 GB (whole process peak RSS)  "
          f"{mark[targets['memory_ok']]}")
    print(f"  floor  {targets['floor_ratio']:8.2f} x  <= 2x floor    {mark[targets['floor_ok']]}")


def print_profile(result: dict[str, Any]) -> None:
    """Phase breakdown and current-versus-proposed comparison of one profiled configuration."""
    job, prof = result["job"], result["profile"]
    floor = 2.0 * job["arms"] * job["m"] ** 2 / float(np.median(prof["gemm_flops"]))
    base = float(np.median(prof["seconds"]["service NystromPosterior"]))
    print(f"\nprofile A={job['arms']:.0e} m={job['m']} (block_rows={job['block_rows']}, "
          f"{len(prof['gemm_flops'])} interleaved repeats, floor {floor:.3f} s)")
    print(f"  {'variant':<28} {'median(s)':>9} {'min(s)':>8} {'speedup':>7} {'x floor':>7}")
    for name, samples in prof["seconds"].items():
        med = float(np.median(samples))
        print(f"  {name:<28} {med:>9.3f} {min(samples):>8.3f} {base / med:>7.2f} "
              f"{med / floor:>7.2f}")
    for name, phases in prof["phases"].items():
        if not phases:
            continue
        total = sum(phases.values())
        print(f"  phases of {name} (mean per construction, {total:.3f} s):")
        for key, value in sorted(phases.items(), key=lambda kv: -kv[1]):
            print(f"    {key:<34} {value:>8.3f} s {100 * value / total:>5.1f} %")
    for name, errors in prof["max_abs_error"].items():
        worst = ", ".join(f"{k} {v:.1e}" for k, v in errors.items())
        print(f"  max |current - {name}|: {worst}")
    print(f"  tracemalloc peak of the fused version: "
          f"{prof['fused_tracemalloc_peak_bytes'] / GB:.3f} GB")
    if "sweep" in result:
        print("  block_rows sweep (best of 2, s): " + "; ".join(
            f"{name}: " + ", ".join(f"{b}: {t:.2f}" for b, t in times.items())
            for name, times in result["sweep"].items()))


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
        left.loglog(arms, [r["f_med"] for r in sub], "x:", color=color, alpha=0.8)
        right.loglog(arms, [r["step_ms"] for r in sub], "o-", color=color, label=f"m={m}")
    left.axhline(TARGET["seconds"], color="grey", lw=0.8)
    left.set(xlabel="candidates A", ylabel="seconds",
             title="resparsification: service (o-), fused proposal (x:), 2Am^2/GEMM rate (--)")
    right.set(xlabel="candidates A", ylabel="ms per step", title="in-batch step (select + add)")
    for ax in (left, right):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_e2e(result: dict[str, Any]) -> None:
    if "error" in result:
        print(f"\ne2e failed: {result['error']}")
        return
    e, job = result["e2e"], result["job"]
    print(f"\nwhole strategy (bbkb, A={job['arms']}, d={job['d']}): {e['evaluations']} evaluations "
          f"in {e['total_seconds']:.2f} s, {e['batches']} batches; batch opening "
          f"(resparsify + posterior) {e['open_seconds_total']:.2f} s total, "
          f"max {e['open_seconds_max']:.3f} s; dictionary size last {e['dictionary_size_last']}, "
          f"max {e['dictionary_size_max']}; best f found {e['best_found']:.3f} "
          f"of {e['best_possible']:.3f}")


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "numpy": np.__version__,
            "scipy": scipy.__version__, "python": platform.python_version(),
            "load_at_start": os.getloadavg()}


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
    ap.add_argument("--steps", type=int, default=200, help="in-batch steps to average")
    ap.add_argument("--pulled", type=int, default=2000, help="distinct pulled arms (>= 2m)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", choices=["none", "target", "all"], default="target",
                    help="phase profile + proposed version (target: largest A, m = 256)")
    ap.add_argument("--no-sweep", dest="sweep", action="store_false",
                    help="skip the block_rows sweep of the profiled configuration")
    ap.add_argument("--e2e-arms", type=int, default=20640, help="0 skips the Strategy run")
    ap.add_argument("--e2e-steps", type=int, default=1000)
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="OPENBLAS/OMP_NUM_THREADS of the workers (0: library default)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per worker")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.arms, args.dicts, args.repeats, args.min_seconds = [10**3, 10**4], [64, 128], 2, 0.5
        args.steps, args.sweep, args.e2e_steps = 50, False, 200
        args.e2e_arms = min(args.e2e_arms, 2000)
    return args


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Print the tables, fits, targets and profile; return the JSON summary."""
    ok = [r for r in results if "error" not in r]
    for r in results:
        if "error" in r:
            print(f"FAILED A={r['job']['arms']} m={r['job']['m']}: {r['error']}")
    rows = [summarise(r) for r in ok]
    print(f"\nresparsification = NystromPosterior construction, d={args.d}, block_rows="
          f"{args.block_rows}; ratio = median of t / (2 A m^2 / GEMM rate measured just before), "
          "best = t_min / floor at the best rate; fused = the proposed construction (see "
          "profile), timed right after each service construction")
    print(TIME_HEADER)
    for row in rows:
        print(format_rows(row)[0])
    print("\nin-batch step (LazyUCB.select + add_pending; sorted* = SortedLazyUCB prototype, same ="
          " same arms) and memory (RSSd = ru_maxrss delta, RSS = process peak, +prev = peak when "
          "the previous posterior is alive, traced = tracemalloc peak, touch = first touch of a "
          "fresh A x m' array)")
    print(STEP_HEADER)
    for row in rows:
        print(format_rows(row)[1])
    fits = {"resparsification (median)": fit_exponents(rows, "t_med", 10**4),
            "resparsification (minimum)": fit_exponents(rows, "t_min", 10**4),
            "fused proposal (median)": fit_exponents(rows, "f_med", 10**4),
            "in-batch step": fit_exponents(rows, "step_ms", 10**4)}
    print()
    for name, fit in fits.items():
        print_fit(name, fit)
    targets = check_targets(rows)
    print()
    print_targets(targets, args.d)
    for r in ok:
        if "profile" in r:
            print_profile(r)
    return {"rows": rows, "fits": fits, "targets": targets}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(Job(**json.loads(args.worker)))))
        return
    started, info = time.perf_counter(), machine()
    print(f"{info['cpu']}, {info['cores']} cores, numpy {info['numpy']}, scipy {info['scipy']}, "
          f"load {info['load_at_start'][0]:.2f}")
    results = []
    for job in plan(args):
        results.append(run_job(job, args.timeout))
        print(f"  done A={job.arms:.0e} m={job.m} ({time.perf_counter() - started:.0f} s)",
              flush=True)
    summary = report(results, args)
    if args.e2e_arms:
        e2e = run_job(Job(arms=args.e2e_arms, m=0, d=args.d, lengthscale=args.lengthscale,
                          lam=args.lam, steps=args.e2e_steps, seed=args.seed, kind="e2e",
                          blas_threads=args.blas_threads),
                      args.timeout)
        print_e2e(e2e)
        summary["e2e"] = e2e
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
