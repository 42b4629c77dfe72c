"""Nystrom (DTC) posterior of BKB / BBKB for one batch, in the 1/lambda-scaled convention.

At batch start (BKB paper, Calandriello et al. 2019, Sec. 3.1, the approximate posterior;
BBKB freezes S for the batch), with dictionary S and embedding z(x):

    V_all = sum_pulled n_a z_a z_a^T + lam I        (observed and pending: variance only)
    V_obs = sum_observed n_a z_a z_a^T + lam I,  b = sum_observed z_a * (sum of y_a)
    mu(x)      = z(x)^T V_obs^-1 b
    sigma2(x)  = (k(x, x) - ||z(x)||^2) / lam + z(x)^T V_all^-1 z(x)

Candidates are stored in the coordinates whitened by V_all = Q diag(v) Q^T (eigh, v >= lam),
z'(x) = diag(v)^-1/2 Q^T z(x) = P^T k_S(x) with P = T Q diag(v)^-1/2, so that one matrix product
per block of candidates embeds and whitens at once, sigma2 = resid / lam + ||z'||^2 and
||z||^2 = sum_j v_j z'_j^2. Inside a batch V_t = Q v^1/2 G v^1/2 Q^T with G = I + sum z'_s z'_s^T:
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


#: Jitter for a Gram matrix whose Cholesky fails, relative to its mean diagonal, tried in turn: a
#: lam below the rounding of Z^T W Z (lam / kernel variance 1e-20, rank-deficient with pending
#: arms) failed at t = 7 and left the study failing at every ask, as lam cannot change.
JITTERS: tuple[float, ...] = (1e-14, 1e-12, 1e-10, 1e-8)


def jittered_cholesky(V: np.ndarray, what: str) -> np.ndarray:
    """Lower Cholesky factor of V, or, where rounding makes V indefinite, of V plus the first of
    :data:`JITTERS` (times its mean diagonal) that is positive definite (GPyTorch's
    psd_safe_cholesky does the same); NumericalError naming lam beyond the last."""
    try:
        return linalg.cholesky(V, lower=True)
    except linalg.LinAlgError as exc:
        failure = exc
    scale = float(np.mean(np.diag(V)))
    for jitter in JITTERS:
        try:
            return linalg.cholesky(V + jitter * scale * np.eye(len(V)), lower=True)
        except linalg.LinAlgError as exc:
            failure = exc
    raise NumericalError(f"Cholesky of {what} failed; try a larger lam (regulariser)",
                         field="lam") from failure


class NystromPosterior:
    """Frozen-dictionary posterior of one batch over all A candidates.

    Parameters
    ----------
    kernel, candidates : the kernel and the (A, d) candidate matrix.
    dictionary : (m,) candidate indices of the inducing points.
    pulled_arms, pulled_counts : distinct arms in V_all and their multiplicities n_a.
    observed_arms, observed_counts, observed_sums : distinct observed arms, counts, sums of y.

    The construction is one pass over the candidates in blocks of ``block_rows``: kernel block
    (written in place), one GEMM into the stored z', then the norms and the mean while the block is
    in cache. Its cost is 2 A m m' flops for the GEMM plus the kernel block (BBKB Appendix A.3).
    ``workspace``: a flat float64 buffer to hold z' (the previous batch's ``workspace``, which
    that batch no longer uses): a fresh A x m' array costs seconds of page faults at A = 10^6.
    """

    def __init__(self, kernel: Kernel, candidates: np.ndarray, dictionary: np.ndarray, *,
                 lam: float, pulled_arms: np.ndarray, pulled_counts: np.ndarray,
                 observed_arms: np.ndarray, observed_counts: np.ndarray,
                 observed_sums: np.ndarray, block_rows: int,
                 workspace: np.ndarray | None = None) -> None:
        self.lam = lam
        self.dictionary = np.asarray(dictionary, dtype=np.int64)
        self.embedding = Embedding(kernel, candidates[self.dictionary])
        embed = self.embedding
        V = _gram(embed(candidates[pulled_arms]), pulled_counts.astype(float), lam)
        v, Q = linalg.eigh(V)  # V_all >= lam I, so every eigenvalue is >= lam > 0 ...
        v[v < 0.5 * lam] = lam  # ... but for rounding beyond lam (lam / variance 1e-20)
        Zo = embed(candidates[observed_arms])
        Lo = jittered_cholesky(_gram(Zo, observed_counts.astype(float), lam), "V_obs")
        w = linalg.cho_solve((Lo, True), Zo.T @ observed_sums)  # mu(x) = z(x)^T w
        project = (embed.transform @ Q) / np.sqrt(v)  # z'(x) = project^T k_S(x)
        self._scale = v  # z = Q v^1/2 z': ||z||^2 = sum v z'^2, L L^T of before = diag(v)
        A, dim, points = len(candidates), embed.dim, embed.points
        if workspace is None or workspace.size < A * dim:  # headroom: m' varies batch to batch
            workspace = np.empty(int(1.25 * A * dim) + 1)
        self.workspace = workspace
        self.whitened = workspace[: A * dim].reshape(A, dim)
        self.residual = np.empty(A)  # k(x, x) - ||z(x)||^2, clipped at 0
        self.variance_start = np.empty(A)
        self.mean = np.empty(A)
        norm_weights = np.stack([np.ones(dim), v], axis=1)  # ||z'||^2 and ||z||^2 in one GEMM
        shift = np.sqrt(v) * (Q.T @ w)  # mu = z'^T shift
        rows_max = min(block_rows, A)
        k_block, squares, norms = (np.empty((rows_max, len(points))), np.empty((rows_max, dim)),
                                   np.empty((rows_max, 2)))
        for start in range(0, A, block_rows):
            rows, n = slice(start, min(start + block_rows, A)), min(block_rows, A - start)
            X = candidates[rows]
            Zb = np.matmul(kernel.into(X, points, k_block[:n]), project, out=self.whitened[rows])
            np.matmul(np.multiply(Zb, Zb, out=squares[:n]), norm_weights, out=norms[:n])
            np.maximum(kernel.diag(X) - norms[:n, 1], 0.0, out=self.residual[rows])
            np.add(self.residual[rows] / lam, norms[:n, 0], out=self.variance_start[rows])
            np.matmul(Zb, shift, out=self.mean[rows])
        self._ginv = np.eye(dim)
        self._outer = np.empty((dim, dim))  # add_pending's rank-one step, one buffer per batch
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
        step = np.multiply(u[:, None], u[None, :], out=self._outer)  # np.outer, in place
        step /= 1.0 + z @ u
        self._ginv -= step

    def covariance_start(self, arm: int) -> np.ndarray:
        """|k~_start(x, x_arm)| of BBKB Lemma 3 for every candidate x, shape (A,): the larger
        of the two covariances of the frozen posterior, in absolute value.

        - z(x)^T V_all^-1 z(x_arm) = z'^T z'_arm: a batch step on x_s moves sigma~^2(x) only
          through it (by (z'^T G^-1 z'_s)^2 / (1 + z'_s^T G^-1 z'_s)), so the sum of its
          squares over the batch bounds the ratio: sigma~^2_start(x) / sigma~^2_t(x) <= 1 +
          sum_s (z'^T z'_s)^2 / sigma~^2_start(x) (Jensen on m / (1 + m) over the eigenvalues
          of sum_s z'_s z'_s^T).
        - The DTC predictive covariance, the paper's k~: (k(x, x_arm) - z^T z_arm) / lam +
          z'^T z'_arm. Its diagonal is sigma~^2: an arm the dictionary does not span (whose
          sigma~^2 is mostly the residual, which no step lowers) ends the batch when repeated,
          as in Lemma 1. Alone it does not bound the ratio: where the dictionary correlates
          points the kernel does not, it is near 0 while sigma~^2 falls (a ratio of 1.12
          against a bound of 1.0001, tests/engine/test_formulas.py).

        Both are covariances (Cauchy-Schwarz: squares <= sigma~^2(x) sigma~^2(x_arm)), so the
        rule stays tighter than Lemma 1's.
        """
        zj = self.whitened[arm]
        embedded = self.whitened @ zj
        k_col = self._kernel(self._candidates, self._candidates[arm : arm + 1])[:, 0]
        predictive = k_col / self.lam + self.whitened @ (zj - self._scale * zj / self.lam)
        return np.maximum(np.abs(embedded), np.abs(predictive))
