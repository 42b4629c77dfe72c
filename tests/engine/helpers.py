"""Shared helpers for engine tests: small problems, exact GP formulas, simulation loops."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy import linalg

from service.engine import EngineConfig, Strategy
from service.engine.kernels import Kernel


def exact_posterior(kernel: Kernel, X: np.ndarray, pulled: np.ndarray, observed: np.ndarray,
                    values: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Textbook GP posterior (one row per selection, duplicates allowed), variance / lam.

    Mean from the observed selections only, variance from all pulled selections.
    """
    Ko = kernel(X[observed], X[observed]) + lam * np.eye(len(observed))
    mean = kernel(X, X[observed]) @ linalg.solve(Ko, values, assume_a="pos")
    Kp = kernel(X[pulled], X[pulled]) + lam * np.eye(len(pulled))
    Kxp = kernel(X, X[pulled])
    var = kernel.diag(X) - np.einsum("ij,ji->i", Kxp, linalg.solve(Kp, Kxp.T, assume_a="pos"))
    return mean, var / lam


def run(strategy: Strategy, f: np.ndarray, steps: int, rng: np.random.Generator,
        noise: float = 0.01) -> np.ndarray:
    """Paper protocol (sync): ask a whole batch, tell every value, until ``steps`` selections."""
    arms: list[int] = []
    while len(arms) < steps:
        batch = strategy.ask_batch()
        assert batch, "a sync strategy with no pending results must produce a batch"
        for sel in batch:
            strategy.tell(sel.t, f[sel.arm] + noise * rng.standard_normal())
        arms.extend(sel.arm for sel in batch)
    return np.asarray(arms[:steps])


def each_step(strategy: Strategy, f: np.ndarray, batches: int, rng: np.random.Generator,
              noise: float = 0.01) -> Iterator[None]:
    """Sync protocol one selection at a time: for each of ``batches`` batches, ask(1) until it
    closes, yielding after each ask (the batch's posterior and rule as they then stand), then
    tell the batch's values."""
    for _ in range(batches):
        pending: list = []
        while not strategy.batch_closed or not pending:
            pending += strategy.ask(1)
            yield
        for sel in pending:
            strategy.tell(sel.t, f[sel.arm] + noise * rng.standard_normal())


def smooth_problem(n: int = 400, d: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random candidates in [0, 1]^d and a smooth bump function with values in [0, 1]."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    centre = np.full(d, 0.7)
    f = np.exp(-np.sum((X - centre) ** 2, axis=1) / 0.1)
    return X, f


def noisy_data(n: int = 50, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n uniform points in [0, 1]^d and a smooth function of them plus N(0, 0.1^2) noise."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    return X, np.sin(3.0 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)


def auto_config(**overrides: object) -> EngineConfig:
    """An engine config with the automatic kernel (lam 0.5, seed 5, sync) and ``overrides``."""
    return EngineConfig(**({"lam": 0.5, "seed": 5, "mode": "sync"} | overrides))
