"""Nystrom (DTC) posterior of BKB / BBKB for one batch, in the 1/lambda-scaled convention.

At batch start (ENGINE.md, "Posterior"), with dictionary S and embedding z(x):

    V_all = sum_pulled n_a z_a z_a^T + lam I        (observed and pending: variance only)
    V_obs = sum_observed n_a z_a z_a^T + lam I,  b = sum_observed z_a * (sum of y_a)
    mu(x)      = z(x)^T V_obs^-1 b
    sigma2(x)  = (k(x, x) - ||z(x)||^2) / lam + z(x)^T V_all^-1 z(x)

Candidates are stored in the coordinates whitened by V_all = L L^T, z'(x) = L^-1 z(x), so that
sigma2 = resid / lam + ||z'||^2 and, inside a batch, V_t = L G L^T with G = I + sum z'_s z'_s^T:
each batch step is a rank-one (Sherman-Morrison) update of G^-1, O(m^2) (BBKB Appendix A.3).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from .errors import NumericalError
from .kernels import Kernel


class Embedding:
    """z(x) = diag(e)^-1/2 U^T k_S(x) from the eigendecomposition of K_S (never its inverse).

    Eigenvalues below ``m * eps * max(e)`` are dropped, so duplicate or near-duplicate dictionary
    points give an embedding of dimension m' < m instead of a singular system.
    """

    def __init__(self, kernel: Kernel, points: np.ndarray) -> None:
        self.kernel = kernel
        self.points = points
        m = len(points)
        if m == 0:
            self.transform = np.zeros((0, 0))
            return
        eigval, eigvec = linalg.eigh(kernel(points, points))
        keep = eigval > max(m, 1) * np.finfo(float).eps * max(eigval.max(), 0.0)
        self.transform = eigvec[:, keep] / np.sqrt(eigval[keep])

    @property
    def dim(self) -> int:
        """Embedding dimension m' (<= dictionary size m)."""
        return self.transform.shape[1]

    def __call__(self, X: np.ndarray) -> np.ndarray:
        """z(X), shape (len(X), m')."""
        if len(self.points) == 0:
            return np.zeros((len(X), 0))
        return self.kernel(X, self.points) @ self.transform


def _gram(Z: np.ndarray, weights: np.ndarray, lam: float) -> np.ndarray:
    """Z^T diag(weights) Z + lam I."""
    V = (Z * weights[:, None]).T @ Z
    V[np.diag_indices_from(V)] += lam
    return V


def _cholesky(V: np.ndarray, what: str) -> np.ndarray:
    try:
        return linalg.cholesky(V, lower=True)
    except linalg.LinAlgError as exc:
        raise NumericalError(f"Cholesky of {what} failed; try a larger lam (regulariser)",
                             field="lam") from exc


class NystromPosterior:
    """Frozen-dictionary posterior of one batch over all A candidates.

    Parameters
    ----------
    kernel, candidates : the kernel and the (A, d) candidate matrix.
    dictionary : (m,) candidate indices of the inducing points.
    pulled_arms, pulled_counts : distinct arms in V_all and their multiplicities n_a.
    observed_arms, observed_counts, observed_sums : distinct observed arms, counts, sums of y.
    """

    def __init__(self, kernel: Kernel, candidates: np.ndarray, dictionary: np.ndarray, *,
                 lam: float, pulled_arms: np.ndarray, pulled_counts: np.ndarray,
                 observed_arms: np.ndarray, observed_counts: np.ndarray,
                 observed_sums: np.ndarray, block_rows: int) -> None:
        self.lam = lam
        self.dictionary = np.asarray(dictionary, dtype=np.int64)
        self.embedding = Embedding(kernel, candidates[self.dictionary])
        embed = self.embedding
        L = _cholesky(_gram(embed(candidates[pulled_arms]), pulled_counts.astype(float), lam),
                      "V_all")
        Zo = embed(candidates[observed_arms])
        Lo = _cholesky(_gram(Zo, observed_counts.astype(float), lam), "V_obs")
        w = linalg.cho_solve((Lo, True), Zo.T @ observed_sums)
        self._chol = L
        A, dim = len(candidates), embed.dim
        self.whitened = np.empty((A, dim))  # z'(x) = L^-1 z(x), row by row
        self.residual = np.empty(A)  # k(x, x) - ||z(x)||^2, clipped at 0
        for start in range(0, A, block_rows):
            rows = slice(start, min(start + block_rows, A))
            Z = embed(candidates[rows])
            self.residual[rows] = kernel.diag(candidates[rows]) - np.einsum("ij,ij->i", Z, Z)
            if dim:
                self.whitened[rows] = linalg.solve_triangular(L, Z.T, lower=True,
                                                              check_finite=False).T
        np.maximum(self.residual, 0.0, out=self.residual)
        self.variance_start = self.residual / lam + np.einsum("ij,ij->i", self.whitened,
                                                              self.whitened)
        self.mean = self.whitened @ (L.T @ w)
        self._ginv = np.eye(dim)
        self._kernel, self._candidates = kernel, candidates

    @property
    def dim(self) -> int:
        return self.embedding.dim

    def variance(self, idx: np.ndarray) -> np.ndarray:
        """Current in-batch sigma~^2 of arms idx: resid / lam + z'^T G^-1 z'."""
        Zi = self.whitened[idx]
        return self.residual[idx] / self.lam + np.einsum("ij,ij->i", Zi @ self._ginv, Zi)

    def add_pending(self, arm: int) -> None:
        """Hallucinate one more pull of ``arm`` (BBKB Alg. 1 line 7; Sherman-Morrison on G^-1)."""
        z = self.whitened[arm]
        u = self._ginv @ z
        self._ginv -= np.outer(u, u) / (1.0 + z @ u)

    def covariance_start(self, arm: int) -> np.ndarray:
        """k~_start(x, x_arm) for every candidate x (BBKB Lemma 3), shape (A,)."""
        zj = self.whitened[arm]
        L = self._chol
        k_col = self._kernel(self._candidates, self._candidates[arm : arm + 1])[:, 0]
        direction = zj - (L.T @ (L @ zj)) / self.lam
        return k_col / self.lam + self.whitened @ direction
