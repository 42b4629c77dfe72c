"""Dictionary sampling and initial designs.

- :func:`resparsify`: BBKB Alg. 1 lines 11-16 (posterior-variance sampling with start-of-batch
  variances), with multiplicities as in BKB: p_a = min(1, q-bar * n_a * sigma~^2_start(a)).
- :func:`warm_start_dictionary`: approximate ridge-leverage-score sampling of imported data
  (BBKB Section 4, "Initialization to leverage existing data"): a uniform sub-dictionary, then
  rounds of q-bar * sigma~^2 sampling against it; from a given dictionary, the redraw of a batch
  whose kernel a refit changed.
- :func:`uncertainty_sampling`: BBKB Alg. 3 (Desautels et al. 2014): greedy argmax of the exact
  posterior variance until max sigma~^2 <= 1/P, which makes every later batch hold >= about
  P (C~ - 1) points.
"""

from __future__ import annotations

import math

import numpy as np

from .exact import ExactPosterior
from .kernels import Kernel
from .nystrom import NystromPosterior


def resparsify(arms: np.ndarray, counts: np.ndarray, variance_start: np.ndarray,
               oversampling: float, rng: np.random.Generator) -> np.ndarray:
    """Sample a new dictionary from the distinct pulled ``arms`` (never empty if arms is not)."""
    if len(arms) == 0:
        return np.zeros(0, dtype=np.int64)
    p = np.minimum(1.0, oversampling * counts * variance_start[arms])
    keep = rng.random(len(arms)) < p
    if not keep.any():
        keep[int(np.argmax(p))] = True
    return np.asarray(arms[keep], dtype=np.int64)


def warm_start_dictionary(kernel: Kernel, candidates: np.ndarray, arms: np.ndarray,
                          counts: np.ndarray, *, lam: float, oversampling: float,
                          rng: np.random.Generator, rounds: int = 2,
                          block_rows: int = 8192,
                          start: np.ndarray | None = None) -> np.ndarray:
    """Dictionary for imported (arm, value) data drawn with approximate leverage scores.

    Starts from ``start`` (candidate indices among ``arms``) or else a uniform subset of size
    about sqrt(n) (at least 32) of the n distinct arms, then ``rounds`` times samples each arm
    with p = min(1, q-bar n_a sigma~^2(a)), where sigma~^2 is the Nystrom variance against the
    previous dictionary with all imported points in V.
    """
    n = len(arms)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if start is not None:
        local = np.flatnonzero(np.isin(arms, start))
    else:
        size = min(n, max(32, math.isqrt(n) + 1))
        local = np.sort(rng.choice(n, size=size, replace=False))
    X = candidates[arms]
    none = np.zeros(0, dtype=np.int64)
    for _ in range(rounds):
        post = NystromPosterior(kernel, X, local, lam=lam, pulled_arms=np.arange(n),
                                pulled_counts=counts, observed_arms=none,
                                observed_counts=none, observed_sums=np.zeros(0),
                                block_rows=block_rows)
        local = resparsify(np.arange(n), counts, post.variance_start, oversampling, rng)
    return np.asarray(arms[local], dtype=np.int64)


def uncertainty_sampling(kernel: Kernel, candidates: np.ndarray, *, lam: float,
                         min_parallelism: int, max_points: int) -> list[int]:
    """BBKB Alg. 3: arms chosen by argmax exact sigma~^2 until max sigma~^2 <= 1/P."""
    post = ExactPosterior(kernel, candidates, lam)
    all_arms = np.arange(len(candidates))
    design: list[int] = []
    while len(design) < max_points:
        var = post.variance(all_arms)
        arm = int(np.argmax(var))
        if var[arm] <= 1.0 / min_parallelism:
            break
        post.add_pending(arm)
        design.append(arm)
    return design
