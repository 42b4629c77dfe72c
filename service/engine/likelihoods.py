"""Log marginal likelihoods of a GP and their gradients: exact, and Titsias' sparse bound.

Parameters are in log space, theta = [log l_1..log l_q, log s2, log noise] with q = 1
(isotropic) or q = d (ARD, one lengthscale per input dimension), for the stationary kernels
k(x, x') = s2 * phi(r), r^2 = sum_j (x_j - x'_j)^2 / l_j^2, phi = exp(-r^2/2) ("rbf") or the
Matern-5/2 (1 + sqrt5 r + 5 r^2/3) exp(-sqrt5 r) ("matern52"), and Gaussian noise of variance
``noise``. Both kernels have d k / d log l_j = g(r) (x_j - x'_j)^2 / l_j^2 with g = k (RBF) or
g = s2 (5/3) (1 + sqrt5 r) exp(-sqrt5 r) (Matern-5/2), which is how every lengthscale gradient
below is written.

- :func:`exact_log_likelihood`: log N(y | 0, K + noise I) (Rasmussen & Williams eq. 2.30) and its
  gradient (R&W eq. 5.9), O(n^3). Used by GP-UCB / GP-BUCB, by the others before a kept fit
  on few arms (autokernel.EXACT_FIT_ARMS) and by GSSBO (any kernel above).
- :func:`sparse_log_likelihood`: Titsias' (2009) variational lower bound
  log N(y | 0, Q + noise I) - tr(K - Q) / (2 noise), Q = K_nm K_mm^-1 K_mn, with the inducing
  points = the current Nystrom dictionary, O(n m^2). The first term alone is the DTC marginal
  likelihood of the posterior BBKB uses (nystrom.py); the trace term makes the objective a lower
  bound on the exact log likelihood, so maximising it cannot trade accuracy for a smaller
  dictionary (DTC's own likelihood can favour hyper-parameters under which the dictionary
  explains the data badly, i.e. it overfits the approximation; Bauer et al. 2016).

:mod:`.hyperparameters` maximises them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.linalg import lapack

from .errors import ConfigError

#: Kernel names the likelihoods understand (the stationary kernels of kernels.py).
LIKELIHOOD_KERNELS: tuple[str, ...] = ("rbf", "gaussian", "matern52")
LOG_2PI = math.log(2.0 * math.pi)
_JITTER = 1e-8  # relative to s2, on K_mm only (the dictionary may hold near-duplicates)

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]


def _kernel_terms(kernel: str, Xs: np.ndarray, Zs: np.ndarray,
                  s2: float) -> tuple[np.ndarray, np.ndarray]:
    """K = k(X, Z) and g (d K / d log l_j = g * (x_j - z_j)^2 / l_j^2), inputs divided by l."""
    return kernel_from_distances(kernel, squared_distances(Xs, Zs), s2)


def kernel_from_distances(kernel: str, d2: np.ndarray,
                           s2: float) -> tuple[np.ndarray, np.ndarray]:
    """K and g of :func:`_kernel_terms` from the squared distances of the scaled inputs."""
    if kernel in ("rbf", "gaussian"):
        K = s2 * np.exp(-0.5 * d2)
        return K, K
    if kernel == "matern52":
        s = np.sqrt(5.0 * d2)
        e = s2 * np.exp(-s)
        return (1.0 + s + s * s / 3.0) * e, (5.0 / 3.0) * (1.0 + s) * e
    raise ConfigError(f"no likelihood for kernel {kernel!r}; choose one of "
                      f"{list(LIKELIHOOD_KERNELS)}", field="kernel.name")


def _contract(H: np.ndarray, Xs: np.ndarray, Zs: np.ndarray) -> np.ndarray:
    """sum_nm H_nm (Xs_nj - Zs_mj)^2 for every dimension j, shape (d,), no n x m x d array."""
    return (H.sum(axis=1) @ (Xs * Xs) + H.sum(axis=0) @ (Zs * Zs)
            - 2.0 * np.einsum("nj,nj->j", Xs, H @ Zs))


def _unpack(theta: np.ndarray, d: int) -> tuple[np.ndarray, float, float]:
    theta = np.asarray(theta, dtype=np.float64)
    q = len(theta) - 2
    if q not in (1, d):
        raise ConfigError(f"theta must hold 1 or d = {d} log lengthscales plus log variance and "
                          f"log noise, got length {len(theta)}", field="theta")
    return np.exp(theta[:q]), float(np.exp(theta[-2])), float(np.exp(theta[-1]))


def exact_log_likelihood(theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                         kernel: str = "rbf",
                         sq_dist: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Exact GP log marginal likelihood log N(y | 0, K + noise I) and its gradient wrt theta.

    Parameters
    ----------
    theta : ndarray of shape (q + 2,), [log l_1..l_q, log s2, log noise], q = 1 or d.
    X : ndarray of shape (n, d); y : ndarray of shape (n,).
    kernel : "rbf" (alias "gaussian") or "matern52".
    sq_dist : optional (n, n) squared distances of X, for an isotropic theta (q = 1): a fit
        computes them once instead of at every evaluation.

    Returns (value, gradient of shape (q + 2,)); value is -inf (gradient 0) if K + noise I is not
    numerically positive definite. R&W Alg. 2.1 (L = cholesky(K + noise I)) and eq. 5.9
    (d/d theta = 1/2 tr((alpha alpha^T - Sigma^-1) dSigma/d theta)), Sigma^-1 by LAPACK potri
    (a third of the cost of cho_solve(L, I)). Cost O(n^3).
    """
    ell, s2, noise = _unpack(theta, X.shape[1])
    n, isotropic = len(y), len(ell) == 1
    if isotropic:
        d2 = (squared_distances(X) if sq_dist is None else sq_dist) / float(ell[0]) ** 2
        K, g = kernel_from_distances(kernel, d2, s2)
    else:
        Xs = X / ell
        K, g = _kernel_terms(kernel, Xs, Xs, s2)
    Sigma = K.copy()
    Sigma.flat[::n + 1] += noise
    L = _cholesky(Sigma)
    if L is None:
        return -math.inf, np.zeros(len(theta))
    alpha = lapack.dpotrs(L, y, lower=1)[0]
    inverse, info = lapack.dpotri(L, lower=1)
    if info != 0:
        return -math.inf, np.zeros(len(theta))
    value = -0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum()) - 0.5 * n * LOG_2PI
    W = np.tril(inverse) + np.tril(inverse, -1).T
    W -= np.outer(alpha, alpha)
    W *= -0.5
    ls_grad = (np.array([float(np.sum(W * g * d2))]) if isotropic
               else _contract(W * g, Xs, Xs))
    return value, np.concatenate([ls_grad, [float(np.sum(W * K)), noise * float(np.trace(W))]])


def _cholesky(A: np.ndarray) -> np.ndarray | None:
    """Lower Cholesky factor of A (LAPACK potrf), or None if A is not numerically positive
    definite. LAPACK is called directly, as in :func:`_solve_lower`: scipy.linalg's checks cost
    more than the factorisation itself at the likelihoods' sizes (7.8 against 2.8 us at
    m = 29), at every evaluation of a fit."""
    L, info = lapack.dpotrf(A, lower=1, clean=1)
    return L if info == 0 else None


def _solve_lower(L: np.ndarray, B: np.ndarray, transpose: bool = False) -> np.ndarray:
    """L^-1 B, or L^-T B, for a factor of :func:`_cholesky` (LAPACK trtrs, the call
    scipy.linalg.solve_triangular makes; its diagonal is positive, so the solve succeeds)."""
    return lapack.dtrtrs(L, B, lower=1, trans=int(transpose))[0]


def squared_distances(X: np.ndarray, Z: np.ndarray | None = None) -> np.ndarray:
    """(n, m) squared Euclidean distances of the rows of X and Z (default X), clipped at 0."""
    Z = X if Z is None else Z
    d2 = (np.einsum("ij,ij->i", X, X)[:, None] + np.einsum("ij,ij->i", Z, Z)[None, :]
          - 2.0 * (X @ Z.T))
    return np.maximum(d2, 0.0, out=d2)


def sparse_log_likelihood(theta: np.ndarray, X: np.ndarray, y: np.ndarray, Z: np.ndarray,
                          kernel: str = "rbf") -> tuple[float, np.ndarray]:
    """Titsias' variational bound with inducing points Z, and its gradient wrt theta.

    F = log N(y | 0, Q + noise I) - tr(K_nn - Q) / (2 noise),  Q = K_nm K_mm^-1 K_mn
    (Titsias 2009, eq. 9), in the stable form of GPflow's SGPR: with L L^T = K_mm,
    V = L^-1 K_mn / sqrt(noise) and B = I + V V^T (eigenvalues >= 1), Sigma = Q + noise I
    = noise (I + V^T V), log det Sigma = n log noise + log det B and tr Q = noise |V|_F^2
    (a Cholesky of K_mm + K_mn K_nm / noise fails, or puts the bound above the exact
    likelihood, on dense dictionaries). Gradient: with alpha = Sigma^-1 y, P = K_mm^-1 K_mn
    and W = (alpha alpha^T - Sigma^-1 + I / noise) / 2, for any kernel parameter
    dF = 2 <W P^T, dK_nm> - <P W P^T, dK_mm> - tr(dK_nn) / (2 noise), where
    W P^T = (alpha (P alpha)^T + V^T (I - B^-1) L^-1 / sqrt(noise)) / 2. Three O(n m^2)
    products (V, V V^T, V^T times an m x m matrix), the rest O(m^3 + n m d).

    Parameters as :func:`exact_log_likelihood`, plus Z : ndarray of shape (m, d).
    """
    ell, s2, noise = _unpack(theta, X.shape[1])
    Xs, Zs = X / ell, Z / ell
    n, m = len(y), len(Z)
    Knm, gnm = _kernel_terms(kernel, Xs, Zs, s2)
    Kmm, gmm = _kernel_terms(kernel, Zs, Zs, s2)
    Kmm.flat[::m + 1] += _JITTER * s2
    sd = math.sqrt(noise)
    L = _cholesky(Kmm)
    if L is None:
        return -math.inf, np.zeros(len(theta))
    V = _solve_lower(L, Knm.T) / sd  # (m, n)
    VVt = V @ V.T
    eye = np.eye(m)
    LB = _cholesky(VVt + eye)
    if LB is None:
        return -math.inf, np.zeros(len(theta))
    Vy = V @ y
    c = _solve_lower(LB, Vy)
    gap = max(n * s2 - noise * float(np.einsum("ij,ij->", V, V)), 0.0)  # tr(K_nn - Q) >= 0
    logdet = n * math.log(noise) + 2.0 * float(np.log(np.diag(LB)).sum())
    value = (-0.5 * (float(y @ y) - float(c @ c)) / noise - 0.5 * logdet - 0.5 * n * LOG_2PI
             - gap / (2.0 * noise))
    B_inv = lapack.dpotrs(LB, eye, lower=1)[0]
    alpha = (y - V.T @ (B_inv @ Vy)) / noise
    Valpha = V @ alpha
    Palpha = _solve_lower(L, Valpha, transpose=True) * sd
    E = _solve_lower(L, eye - B_inv, transpose=True).T / sd  # (I - B^-1) L^-1
    G = 0.5 * (np.outer(alpha, Palpha) + V.T @ E)  # W P^T, (n, m)
    PG = sd * _solve_lower(  # P W P^T = sqrt(noise) L^-T V W P^T, V V^T = B - I
        L, 0.5 * (np.outer(Valpha, Palpha) + VVt @ E), transpose=True)
    q = len(theta) - 2
    d_ell = 2.0 * _contract(G * gnm, Xs, Zs) - _contract(PG * gmm, Zs, Zs)
    d_s2 = 2.0 * float(np.sum(G * Knm)) - float(np.sum(PG * Kmm)) - n * s2 / (2.0 * noise)
    trace_sigma_inv = (n - m + float(np.trace(B_inv))) / noise
    d_noise = noise * (-0.5 * trace_sigma_inv + 0.5 * float(alpha @ alpha)
                       + gap / (2.0 * noise**2))
    d_ell = d_ell if q > 1 else np.array([d_ell.sum()])
    return value, np.concatenate([d_ell, [d_s2, d_noise]])
