"""Exact GP posterior for GP-UCB / GP-BUCB and uncertainty sampling, with incremental Cholesky.

K_P + lam I = L L^T over the pulled selections P (in order, duplicates allowed) and
W = L^-1 K(P, X) (t x A) grow by one row per selection, O(t A), never recomputed from scratch
unless a selection leaves P (an abandoned evaluation). Variances use the same 1/lambda scaling as
the Nystrom posterior: sigma~^2(x) = (k(x, x) - ||W[:, x]||^2) / lam.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from .kernels import Kernel
from .nystrom import JITTERS, jittered_cholesky


class ExactPosterior:
    """Exact GP over a finite candidate set; rows appended as selections are made."""

    def __init__(self, kernel: Kernel, candidates: np.ndarray, lam: float) -> None:
        self._kernel, self._X, self.lam = kernel, candidates, lam
        self._kdiag = kernel.diag(candidates)
        self.pulled: list[int] = []
        self._L = np.zeros((0, 0))
        self._W = np.zeros((0, len(candidates)))
        self._s2 = self._kdiag.copy()  # k(x, x) - ||W[:, x]||^2
        self.mean = np.zeros(len(candidates))
        self.variance_start = self._s2 / lam

    def _grow(self) -> None:
        n, cap = len(self.pulled), self._W.shape[0]
        if n < cap:
            return
        new_cap = max(16, 2 * cap)
        W = np.zeros((new_cap, self._W.shape[1]))
        W[:n] = self._W[:n]
        L = np.zeros((new_cap, new_cap))
        L[:n, :n] = self._L[:n, :n]
        self._W, self._L = W, L

    def add_pending(self, arm: int) -> None:
        """Append selection ``arm`` to P: one new row of L and of W (O(t A))."""
        self._grow()
        n = len(self.pulled)
        l_row = self._W[:n, arm].copy()
        # the pivot is lam + sigma^2 >= lam; where lam is far below k(x, x), rounding leaves it
        # anywhere in +-eps k(x, x), and a tiny positive one amplifies the next rows' rounding
        # until they overflow: floor it at the Nystrom posterior's largest jitter (1e-8 of
        # k(x, x) + lam; the least, 1e-14, still overflowed). A lam below ~1e-8 k(x, x) thus
        # acts as ~1e-8 k(x, x) on repeated arms, as the Nystrom Cholesky's jitter does
        floor = JITTERS[-1] * (self._kdiag[arm] + self.lam)
        d2 = max(self._kdiag[arm] + self.lam - l_row @ l_row, floor)
        d = np.sqrt(d2)
        k_row = self._kernel(self._X[arm : arm + 1], self._X)[0]
        w = (k_row - l_row @ self._W[:n]) / d
        self._L[n, :n], self._L[n, n] = l_row, d
        self._W[n] = w
        self._s2 -= w * w
        np.maximum(self._s2, 0.0, out=self._s2)
        self.pulled.append(int(arm))

    def reset_to(self, pulled: list[int]) -> None:
        """Make P equal ``pulled``: append if it extends the current P, else rebuild."""
        if self.pulled != pulled[: len(self.pulled)]:
            self.pulled = []
            self._W[:] = 0.0
            self._s2 = self._kdiag.copy()
        for arm in pulled[len(self.pulled):]:
            self.add_pending(arm)

    def open_batch(self, observed_t_positions: np.ndarray, observed_values: np.ndarray) -> None:
        """Freeze mean and start variance; the mean uses only the observed subset of P.

        ``observed_t_positions`` are positions in P of the observed selections.
        """
        n = len(self.pulled)
        self.variance_start = self._s2 / self.lam
        if len(observed_t_positions) == 0:
            self.mean = np.zeros(len(self._X))
        elif len(observed_t_positions) == n:  # every pulled point observed: reuse L and W
            c = linalg.solve_triangular(self._L[:n, :n], observed_values, lower=True)
            self.mean = c @ self._W[:n]
        else:  # pending points present (async mode): solve on the observed subset
            obs_arms = np.asarray(self.pulled)[observed_t_positions]
            K = self._kernel(self._X[obs_arms], self._X[obs_arms])
            K[np.diag_indices_from(K)] += self.lam
            factor = jittered_cholesky(K, "the observed arms' kernel matrix")
            alpha = linalg.cho_solve((factor, True), observed_values)
            self.mean = self._kernel(self._X, self._X[obs_arms]) @ alpha

    def variance(self, idx: np.ndarray) -> np.ndarray:
        """Current sigma~^2 (pending points included), kept up to date eagerly."""
        return self._s2[idx] / self.lam

    def covariance_start(self, arm: int) -> np.ndarray:  # pragma: no cover - guarded by config
        raise NotImplementedError("the local stopping rule is defined for the Nystrom posterior")
