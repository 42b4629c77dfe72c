"""Exact GP posterior for GP-UCB / GP-BUCB and uncertainty sampling, with incremental Cholesky.

K_P + lam I = L L^T over the pulled selections P (in order, duplicates allowed) and
W = L^-1 K(P, X) (t x A) grow by one row per selection, O(t A), never recomputed from scratch
unless a selection leaves P (an abandoned evaluation). Variances use the same 1/lambda scaling as
the Nystrom posterior: sigma~^2(x) = (k(x, x) - ||W[:, x]||^2) / lam.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from .errors import CapacityError
from .kernels import Kernel
from .nystrom import JITTERS, jittered_cholesky

#: The least lam, as a fraction of the largest k(x, x), at which the async mean is computed
#: from the factor of every pulled selection (ExactPosterior._block_pays).
SUBSET_LAM = 1e-7
#: The most memory one exact posterior may hold (its W, t x A, and L, t x t, float64): a server
#: keeps several studies' engines, and one GP-UCB study past it would take the process down.
EXACT_MEMORY_BYTES = 2 * 2**30


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
        needed = 8 * new_cap * (self._W.shape[1] + new_cap)  # W and L, float64
        if needed > EXACT_MEMORY_BYTES:
            raise CapacityError(
                f"the exact GP keeps a t x A matrix: at t = {n + 1} over A = "
                f"{self._W.shape[1]} candidates it would take {needed / 2**30:.1f} GiB, past "
                f"its {EXACT_MEMORY_BYTES / 2**30:g} GiB; its selections so far are kept, but "
                "it can make no more: go on in a new study with strategy bbkb (the Nystrom GP, "
                "near-linear in t), importing these observations", field="strategy")
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
        elif self._block_pays(len(observed_t_positions)):  # pending present (async mode)
            self.mean = self._subset_mean(np.asarray(observed_t_positions), observed_values)
        else:  # many pending, or lam near rounding: solve on the observed subset itself
            obs_arms = np.asarray(self.pulled)[observed_t_positions]
            K = self._kernel(self._X[obs_arms], self._X[obs_arms])
            K[np.diag_indices_from(K)] += self.lam
            factor = jittered_cholesky(K, "the observed arms' kernel matrix")
            alpha = linalg.cho_solve((factor, True), observed_values)
            self.mean = self._kernel(self._X, self._X[obs_arms]) @ alpha

    def _block_pays(self, n_observed: int) -> bool:
        """Whether :meth:`_subset_mean` is cheaper and as sound as a Cholesky of the observed
        subset. Cheaper: its two solves cost 2 t^2 per pending selection, the Cholesky
        |O|^3 / 3 and K(X, O) A |O| d: pending at most a quarter of t (measured at t = 1600 on
        Abalone: 119 against 176 ms with 400 pending, 242 against 104 with 800; an ask(800)
        took 12.3 CPU s against 3.1). Sound: its error follows the condition number of
        K_PP + lam I, at most (t k_max + lam) / lam, where the Cholesky's follows that of
        K_OO + lam I; lam at least SUBSET_LAM k_max bounds it (and no pivot of L is then
        floored, as add_pending floors them at 1e-8 (k(x, x) + lam)). Measured against a
        40-digit solve with lam 1e-6 to 10 of the kernel's variance and most of P observed:
        within 2.5x of the Cholesky's error; below that lam, with a floored pivot, 1e-2 where
        the Cholesky's was 4e-8."""
        n_pending = len(self.pulled) - n_observed
        return (4 * n_pending <= len(self.pulled)
                and self.lam >= SUBSET_LAM * float(self._kdiag.max()))

    def _subset_mean(self, observed: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The posterior mean given the observed positions O of P only, from the factor of all
        of P (M = K_PP + lam I = L L^T) instead of a new Cholesky of M_OO: with U the pending
        positions, M_OO^-1 = (M^-1)_OO - (M^-1)_OU ((M^-1)_UU)^-1 (M^-1)_UO (the inverse of a
        block matrix), so alpha_O = z_O - B_O S^-1 z_U with z = M^-1 [y; 0], B = M^-1 E_U and
        S = B_U; then mean = K(X, P) alpha = (L^T alpha)^T W. O(|U| t^2 + t A) a batch where
        the Cholesky and K(X, O) cost O(t^3 + t A d): GP-UCB in async mode on Abalone at
        t = 1600, 8 in flight, 153 -> 14 CPU ms a step, the same arms
        (benchmarks/exact_step.py). S is the inverse of the pending points' posterior
        covariance plus lam I given O: eigenvalues in [1 / (k + lam), 1 / lam]."""
        n = len(self.pulled)
        L = np.ascontiguousarray(self._L[:n, :n])  # one copy: scipy would make one per solve
        pending = np.setdiff1d(np.arange(n), observed, assume_unique=True)
        rhs = np.zeros((n, 1 + len(pending)))
        rhs[observed, 0] = values
        rhs[pending, 1 + np.arange(len(pending))] = 1.0
        half = linalg.solve_triangular(L, rhs, lower=True, check_finite=False)
        solved = linalg.solve_triangular(L, half, lower=True, trans="T",  # M^-1 [y, E_U]
                                         check_finite=False)
        z, B = solved[:, 0], solved[:, 1:]
        S = B[pending]
        alpha = z - B @ linalg.solve(S, z[pending], assume_a="pos", check_finite=False)
        alpha[pending] = 0.0
        return (L.T @ alpha) @ self._W[:n]

    def variance(self, idx: np.ndarray) -> np.ndarray:
        """Current sigma~^2 (pending points included), kept up to date eagerly."""
        return self._s2[idx] / self.lam

    def covariance_start(self, arm: int) -> np.ndarray:  # pragma: no cover - guarded by config
        raise NotImplementedError("the local stopping rule is defined for the Nystrom posterior")
