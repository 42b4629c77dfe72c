"""Regret sanity on discretised standard functions: BBKB far below uniform, close to GP-BUCB."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import Strategy
from service.problems import function_problem

from .helpers import run

T = 300


def _scaled(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidates mapped to [0, 1]^d and values min-max scaled to [0, 1] (F = 1 is then sane)."""
    problem = function_problem(name, n_candidates=n, seed=0)
    lo, hi = problem.candidates.min(0), problem.candidates.max(0)
    f = problem.values
    return (problem.candidates - lo) / (hi - lo), (f - f.min()) / (f.max() - f.min())


def _regret_ratio(X: np.ndarray, f: np.ndarray, strategy: str, seed: int) -> float:
    s = Strategy(X, strategy=strategy, kernel={"name": "rbf", "lengthscale": 0.2}, lam=0.1,
                 explore=0.1, mode="sync", seed=seed)
    arms = run(s, f, T, np.random.default_rng(seed))
    return float(np.sum(f.max() - f[arms]) / (T * (f.max() - f.mean())))


@pytest.mark.slow
@pytest.mark.parametrize("name, n", [("branin", 1000), ("hartmann6", 2000)])
def test_bbkb_regret_is_far_below_uniform_and_close_to_gp_bucb(name, n):
    X, f = _scaled(name, n)
    bbkb = np.mean([_regret_ratio(X, f, "bbkb", seed) for seed in range(2)])
    bucb = np.mean([_regret_ratio(X, f, "gp-bucb", seed) for seed in range(2)])
    assert bbkb < 0.25  # uniform has ratio 1 by definition
    assert bbkb < 1.5 * bucb + 0.02
