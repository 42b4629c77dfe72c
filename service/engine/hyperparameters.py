"""Kernel hyper-parameters by maximum marginal likelihood: exact GP and sparse (Titsias) GP.

Parameters are optimised in log space, theta = [log l_1..log l_q, log s2, log noise] with q = 1
(isotropic) or q = d (ARD, one lengthscale per input dimension), for the stationary kernels
k(x, x') = s2 * phi(r), r^2 = sum_j (x_j - x'_j)^2 / l_j^2, phi = exp(-r^2/2) ("rbf") or the
Matern-5/2 (1 + sqrt5 r + 5 r^2/3) exp(-sqrt5 r) ("matern52"), and Gaussian noise of variance
``noise``. Both kernels have d k / d log l_j = g(r) (x_j - x'_j)^2 / l_j^2 with g = k (RBF) or
g = s2 (5/3) (1 + sqrt5 r) exp(-sqrt5 r) (Matern-5/2), which is how every lengthscale gradient
below is written.

- :func:`exact_log_likelihood`: log N(y | 0, K + noise I) (Rasmussen & Williams eq. 2.30) and its
  gradient (R&W eq. 5.9), O(n^3). Used by GP-UCB / GP-BUCB here and by GSSBO (any kernel above).
- :func:`sparse_log_likelihood`: Titsias' (2009) variational lower bound
  log N(y | 0, Q + noise I) - tr(K - Q) / (2 noise), Q = K_nm K_mm^-1 K_mn, with the inducing
  points = the current Nystrom dictionary, O(n m^2). The first term alone is the DTC marginal
  likelihood of the posterior BBKB uses (nystrom.py); the trace term makes the objective a lower
  bound on the exact log likelihood, so maximising it cannot trade accuracy for a smaller
  dictionary (DTC's own likelihood can favour hyper-parameters under which the dictionary
  explains the data badly, i.e. it overfits the approximation; Bauer et al. 2016).
- :func:`fit`: L-BFGS-B over theta with box bounds, a weak log-normal prior and a few restarts
  from a seeded generator, on y standardised to mean 0 and variance 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import optimize
from scipy.linalg import lapack
from scipy.spatial import distance

from .errors import ConfigError
from .normalize import ROUNDING

#: Kernel names the likelihoods understand (the stationary kernels of kernels.py).
LIKELIHOOD_KERNELS: tuple[str, ...] = ("rbf", "gaussian", "matern52")
_LOG_2PI = math.log(2.0 * math.pi)
_LOG_RANGE = (math.log(np.finfo(np.float64).tiny), math.log(np.finfo(np.float64).max))
_JITTER = 1e-8  # relative to s2, on K_mm only (the dictionary may hold near-duplicates)

Objective = Callable[[np.ndarray], tuple[float, np.ndarray]]


@dataclass(frozen=True)
class Hyperparameters:
    """Fitted (or default) kernel hyper-parameters in the units of the data they were fit on.

    ``lengthscale`` holds one value (isotropic) or d values (ARD); ``variance`` is the signal
    variance s2 and ``noise`` the noise variance.
    """

    lengthscale: tuple[float, ...]
    variance: float
    noise: float

    @property
    def theta(self) -> np.ndarray:
        """Log-parameter vector [log l..., log s2, log noise]."""
        return np.log(np.array([*self.lengthscale, self.variance, self.noise]))

    @classmethod
    def from_theta(cls, theta: np.ndarray) -> Hyperparameters:
        """From log parameters, each kept within float64's normal numbers: a fit on values
        spread over 1e-162 has variances of 1e-324, which would underflow to 0."""
        values = np.exp(np.clip(np.asarray(theta, dtype=np.float64), *_LOG_RANGE))
        return cls(tuple(float(v) for v in values[:-2]), float(values[-2]), float(values[-1]))


def _kernel_terms(kernel: str, Xs: np.ndarray, Zs: np.ndarray,
                  s2: float) -> tuple[np.ndarray, np.ndarray]:
    """K = k(X, Z) and g (d K / d log l_j = g * (x_j - z_j)^2 / l_j^2), inputs divided by l."""
    return _kernel_from_distances(kernel, squared_distances(Xs, Zs), s2)


def _kernel_from_distances(kernel: str, d2: np.ndarray,
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
        K, g = _kernel_from_distances(kernel, d2, s2)
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
    value = -0.5 * float(y @ alpha) - float(np.log(np.diag(L)).sum()) - 0.5 * n * _LOG_2PI
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
    value = (-0.5 * (float(y @ y) - float(c @ c)) / noise - 0.5 * logdet - 0.5 * n * _LOG_2PI
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


def median_distance(X: np.ndarray, rng: np.random.Generator, max_points: int = 1000) -> float:
    """Median pairwise Euclidean distance of a seeded subsample of rows (the median heuristic).

    Returns 1.0 if every sampled pair coincides.
    """
    if len(X) > max_points:
        X = X[np.sort(rng.choice(len(X), size=max_points, replace=False))]
    dist = distance.pdist(X)  # condensed: each pair once, in C (every rebuild pays this)
    dist = dist[dist > 0]
    return float(np.median(dist)) if len(dist) else 1.0


def rms_distance(X: np.ndarray) -> float:
    """Root mean square distance between two independently drawn rows, sqrt(2 sum_j Var_j)
    (sqrt(2 d) on z-scored columns): the automatic lengthscale's start and prior centre.

    O(A d) and deterministic. Longer than the median distance where the rows cluster (Cadata
    4.0 against 3.0, whose best fixed bandwidth is 4: the shorter start cost 3/4 of auto's regret
    gap there, before any fit). Returns 1.0 if every row is the same.
    """
    rms = math.sqrt(2.0 * float(np.var(X, axis=0).sum()))
    return rms if rms > 0 else 1.0


def neighbour_lengthscale(X: np.ndarray, correlation: float, kernel: str = "rbf",
                          rows: int = 200, block: int = 65536) -> float:
    """The lengthscale at which a candidate and its nearest other candidate (median over
    ``rows`` evenly spaced rows) have kernel correlation ``correlation``: median distance /
    :func:`correlation_distance`.

    O(rows A d), in blocks of ``block`` rows, deterministic (1.9 s at A = 10^6, d = 50).
    A copy of a row (equal in every column) is not its neighbour: with every candidate listed
    twice the floor was 0, and off. Returns 0.0 if every candidate is the same.
    """
    idx = np.unique(np.linspace(0, len(X) - 1, min(rows, len(X))).astype(np.int64))
    S, nearest = X[idx], np.full(len(idx), np.inf)
    S_norms = np.einsum("ij,ij->i", S, S)[:, None]
    for lo in range(0, len(X), block):
        B = X[lo:lo + block]
        d2 = squared_distances(S, B)
        # neither the row itself nor its copies: the expansion leaves rounding, not 0, so the
        # rows that come close are compared
        i, j = np.nonzero(d2 <= _COPY_DISTANCE * (S_norms + np.einsum("ij,ij->i", B, B)))
        copies = ~np.any(S[i] != B[j], axis=1)
        d2[i[copies], j[copies]] = np.inf
        nearest = np.minimum(nearest, d2.min(axis=1))
    nearest[np.isinf(nearest)] = 0.0  # a row with no other value (every candidate the same)
    median = math.sqrt(float(np.median(nearest))) if len(X) > 1 else 0.0
    return median / correlation_distance(kernel, correlation)


#: Squared distances below this fraction of the two rows' squared norms are checked for being
#: copies (an expansion |x|^2 + |z|^2 - 2 x.z of equal rows leaves rounding of that order).
_COPY_DISTANCE = 1e-8


def correlation_distance(kernel: str, correlation: float) -> float:
    """The distance, in lengthscales, at which the kernel's correlation is ``correlation``
    (0 < correlation < 1): sqrt(2 ln(1 / correlation)) for the RBF, by root finding else."""
    if kernel in ("rbf", "gaussian"):
        return math.sqrt(2.0 * math.log(1.0 / correlation))
    return float(optimize.brentq(
        lambda r: _kernel_from_distances(kernel, np.array(r * r), 1.0)[0] - correlation,
        0.0, 100.0, xtol=1e-12))


@dataclass(frozen=True)
class Prior:
    """Independent weak log-normal priors and box bounds on the log parameters.

    Centres: lengthscale ``lengthscale`` (e.g. :func:`rms_distance`), signal variance 1 and noise
    variance ``noise`` (y is standardised before fitting). ``sd`` is the prior's standard
    deviation in log space (1: a factor e either way); the bounds are centre * / ``span`` (noise:
    [1e-6, 1]). Defaults chosen with benchmarks/hyperparameters.py (a noise centre of 0.01
    instead of 0.1 favoured interpolating UCB's few distinct arms with a short lengthscale).
    """

    lengthscale: float
    noise: float = 0.1
    sd: float = 1.0
    span: float = 30.0

    def centre(self, q: int) -> np.ndarray:
        return np.log(np.array([self.lengthscale] * q + [1.0, self.noise]))

    def bounds(self, q: int) -> list[tuple[float, float]]:
        log_span = math.log(self.span)
        ls = math.log(self.lengthscale)
        return ([(ls - log_span, ls + log_span)] * q + [(-log_span, log_span)]
                + [(math.log(1e-6), 0.0)])

    def log_density(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        diff = (theta - self.centre(len(theta) - 2)) / self.sd
        return -0.5 * float(diff @ diff), -diff / self.sd


@dataclass(frozen=True)
class FitResult:
    """Best hyper-parameters (in the units of the y given to :func:`fit`) and the fit's log."""

    hyperparameters: Hyperparameters
    objective: float  # log likelihood (or bound) + log prior at the optimum, standardised y
    n_points: int
    evaluations: int
    #: log likelihood (or bound) at the optimum minus that of white noise, both on the
    #: standardised y: the evidence that the data have a kernel structure at all.
    evidence: float = 0.0
    #: log likelihood (or bound) at the optimum minus its maximum over (s2, noise) with the
    #: lengthscales fixed at the incumbent's (those kept if the fit is rejected), or an upper
    #: bound on it that is already within BIC's price (:func:`_with_gain`); None when the
    #: evidence alone makes the fit significant.
    gain: float | None = None

    @property
    def significant(self) -> bool:
        """BIC prefers the fitted GP to white noise, evidence > (q + 1)/2 log n (q lengthscales
        and the signal variance are the extra parameters), or to the incumbent lengthscales,
        gain > q/2 log n: a lengthscale the data contradict is not kept just because the data
        do not yet beat white noise (the start's 3.5 on Hartmann-6, where the
        bound prefers 1 by several nats from ~45 arms on, benchmarks/hyperparameters.py)."""
        q = len(self.hyperparameters.lengthscale)
        return (self.evidence > bic_penalty(q + 1, self.n_points)
                or (self.gain is not None and self.gain > bic_penalty(q, self.n_points)))


def bic_penalty(parameters: int, n: int) -> float:
    """BIC's price of ``parameters`` extra parameters on ``n`` points: k/2 log n (nats)."""
    return 0.5 * parameters * math.log(max(n, 2))


def fit(X: np.ndarray, y: np.ndarray, *, prior: Prior, rng: np.random.Generator,
        kernel: str = "rbf", ard: bool = False, ard_margin: float = 1.0,
        inducing: np.ndarray | None = None, start: Hyperparameters | None = None,
        trust: float | None = None, restarts: int = 2, max_points: int = 2000,
        max_iter: int = 60) -> FitResult:
    """Maximise log likelihood + log prior over theta with L-BFGS-B (MAP estimate).

    Parameters
    ----------
    X : ndarray of shape (n, d); y : ndarray of shape (n,), n >= 2.
    prior : the weak log-normal prior and bounds (on standardised y).
    rng : seeded generator for the subsample and the restarts (the fit is deterministic).
    kernel : "rbf" or "matern52"; ard : one lengthscale per dimension if BIC prefers them to
        the isotropic fit by ``ard_margin`` times its penalty (likelihood gain > ard_margin
        (d - 1)/2 log n; :data:`ARD_MARGIN`), else the isotropic fit: the d prior terms pull
        an ARD MAP towards the prior centre, so that on Hartmann-6 it stayed below the BIC
        threshold against white noise where the isotropic fit was far above.
    inducing : ndarray of shape (m, d) -> Titsias' sparse bound, O(n m^2) per evaluation;
        None -> exact likelihood, O(n^3).
    start : first starting point (e.g. the current values); the others are the prior centre and
        ``restarts`` draws from the prior, clipped to the bounds.
    trust : with ``start``, each lengthscale stays within a factor ``trust`` of start's (a trust
        region on top of the prior's bounds), else None. A refit (both given) starts from
        ``start`` alone (plus ``restarts``): the prior centre, clipped into the region, ended
        at the incumbent's optimum within 1e-6 nats on every refit checked (Hartmann-6,
        Cadata, seed 0) for 11-19 of about 35 evaluations; without it the fits cost 25-44%
        less CPU with the regret ratios within 2% (benchmarks/hyperparameters.py).
    max_points : n is subsampled uniformly (by ``rng``) to at most this many rows.

    Returns hyper-parameters in the units of y (s2 and noise rescaled by var(y)), the evidence
    against white noise and, if that evidence is not significant, the gain over the incumbent
    lengthscales (``start``'s, else the prior centre), by likelihood alone: the prior (s2 ~ 1,
    noise ~ 0.1) favours short lengthscales on data without structure, where a
    short-lengthscale GP is white noise.
    """
    X, y = subsample(X, y, rng, max_points)
    d, n = X.shape[1], len(y)
    ys, scale = standardised(y)
    if not ys.any():  # constant values say nothing of any kernel: no fit, no evidence
        return FitResult(start or Hyperparameters.from_theta(prior.centre(1)), 0.0, n, 0, 0.0,
                         gain=0.0)
    likelihood = _likelihood(X, ys, kernel, inducing)
    trust = trust if start is not None else None  # a trust region only around a start
    chosen = _map_fit(likelihood, n, scale, 1, prior, rng, start, trust, restarts, max_iter)
    if ard and d > 1:
        full = _map_fit(likelihood, n, scale, d, prior, rng, start, trust, restarts, max_iter,
                        chosen.hyperparameters)
        evaluations = chosen.evaluations + full.evaluations
        if full.evidence - chosen.evidence > ard_margin * bic_penalty(d - 1, n):
            chosen = full
        chosen = replace(chosen, evaluations=evaluations)
    return _with_gain(chosen, likelihood, scale, prior, start, trust, max_iter)


def subsample(X: np.ndarray, y: np.ndarray, rng: np.random.Generator,
              max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` rows of (X, y), drawn uniformly by ``rng`` (in their order), as
    float64; all of them, and no draw, if there are no more."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(y) <= max_points:
        return X, y
    keep = np.sort(rng.choice(len(y), size=max_points, replace=False))
    return X[keep], y[keep]


def _start(start: Hyperparameters | None, q: int, prior: Prior, scale: float) -> np.ndarray:
    """The incumbent theta of a fit with q lengthscales on y standardised by ``scale``:
    ``start``'s (isotropic <-> ARD: the mean log lengthscale broadcast), else the prior's
    centre."""
    if start is None:
        return prior.centre(q)
    theta = start.theta
    theta[-2:] -= 2.0 * math.log(scale)
    if len(theta) - 2 != q:
        theta = np.concatenate([np.full(q, theta[:-2].mean()), theta[-2:]])
    return theta


def _bounds(prior: Prior, q: int, incumbent: np.ndarray,
            trust: float | None) -> list[tuple[float, float]]:
    """The prior's box, the lengthscales' narrowed to a factor ``trust`` around the incumbent's."""
    bounds = prior.bounds(q)
    if trust is not None:
        radius = math.log(trust)
        bounds[:q] = [(max(lo, min(hi, t - radius)), min(hi, max(lo, t + radius)))
                      for (lo, hi), t in zip(bounds[:q], incumbent[:q], strict=True)]
    return bounds


def _map_fit(likelihood: Objective, n: int, scale: float, q: int, prior: Prior,
             rng: np.random.Generator, start: Hyperparameters | None, trust: float | None,
             restarts: int, max_iter: int,
             isotropic: Hyperparameters | None = None) -> FitResult:
    """:func:`fit` with q = 1 or d lengthscales, without the gain: ``likelihood`` on the n
    (subsampled) values standardised by ``scale``. With ``isotropic`` (the one-lengthscale fit
    on the same data), the ARD fit starts from its optimum and from an ARD ``start`` only, not
    from the prior: 2-3x fewer evaluations (an ARD fit with the prior's starts doubled to
    quintupled the refit's time at d = 2-50)."""
    incumbent = _start(start, q, prior, scale)
    bounds = _bounds(prior, q, incumbent, trust)
    if isotropic is not None:
        seed = _start(isotropic, q, prior, scale)
        starts = [seed] + ([incumbent] if start is not None and len(start.lengthscale) == q
                           else [])
    else:
        starts = [incumbent] if start is not None else []
        if start is None or trust is None:  # a refit (both given): from the incumbent only
            starts.append(prior.centre(q))
        starts += [prior.centre(q) + prior.sd * rng.standard_normal(q + 2)
                   for _ in range(restarts)]
    best, evaluations = minimize_from(map_objective(likelihood, prior), starts, bounds, max_iter)
    theta = np.array(best.x)
    log_likelihood = -float(best.fun) - prior.log_density(theta)[0]
    evidence = log_likelihood + 0.5 * n * (1.0 + _LOG_2PI)  # minus N(0, 1)'s, on ys
    theta[-2:] += 2.0 * math.log(scale)
    return FitResult(Hyperparameters.from_theta(theta), -float(best.fun), n, evaluations,
                     evidence)


def _with_gain(result: FitResult, likelihood: Objective, scale: float, prior: Prior,
               start: Hyperparameters | None, trust: float | None,
               max_iter: int) -> FitResult:
    """``result`` with its gain over the incumbent lengthscales if its evidence alone is not
    significant: the likelihood minus the incumbent's profile likelihood (:func:`_profile`,
    from the fit's and the incumbent's (s2, noise)). Where the likelihood at those two starting
    points already leaves a gain within BIC's price, that bound is the gain, without the
    profile's 2-parameter fits (which took 46% of a refit's evaluations at d = 8 with ARD)."""
    q, n = len(result.hyperparameters.lengthscale), result.n_points
    if result.evidence > bic_penalty(q + 1, n):
        return result
    incumbent = _start(start, q, prior, scale)
    bounds = _bounds(prior, q, incumbent, trust)
    low, high = np.array(bounds).T
    log_lengthscale = np.clip(incumbent[:q], low[:q], high[:q])
    starts = [np.clip(x0, low[q:], high[q:])
              for x0 in (_start(result.hyperparameters, q, prior, scale)[q:], incumbent[q:])]
    fitted = result.evidence - 0.5 * n * (1.0 + _LOG_2PI)  # the fit's log likelihood
    at_starts = [likelihood(np.concatenate([log_lengthscale, x0]))[0] for x0 in starts]
    gain = fitted - max((v for v in at_starts if not math.isnan(v)), default=-math.inf)
    evaluations = result.evaluations + len(starts)
    if gain > bic_penalty(q, n):  # the bound passes: the profile itself
        kept, extra = _profile(likelihood, log_lengthscale, starts, bounds[q:], max_iter)
        gain, evaluations = fitted - kept, evaluations + extra
    if not math.isfinite(gain):  # no finite likelihood at the incumbent: no evidence either way
        gain = 0.0
    return replace(result, gain=gain, evaluations=evaluations)


def standardised(y: np.ndarray) -> tuple[np.ndarray, float]:
    """y at mean 0 and variance 1 (the units every fit runs in), and the scale divided out.
    Values equal to within rounding (a spread below normalize.ROUNDING times their mean) are
    constant: zeros and scale 1, where dividing by the rounding's spread made +-1 of it. A
    spread below 1e-150, whose squares underflow, is measured in units of its largest
    deviation (values of 1e-162 had a standard deviation of 0)."""
    mean, scale = y.mean(), float(np.std(y))
    if scale < 1e-150:
        peak = float(np.max(np.abs(y - mean), initial=0.0))
        scale = peak * float(np.std((y - mean) / peak)) if peak > 0 else 0.0
    if not scale > ROUNDING * abs(mean):
        return np.zeros_like(y), 1.0
    return (y - mean) / scale, scale


def _likelihood(X: np.ndarray, ys: np.ndarray, kernel: str,
                inducing: np.ndarray | None) -> Objective:
    """theta -> (log likelihood, gradient): exact, or Titsias' bound on ``inducing``."""
    if inducing is None:
        return lambda theta: exact_log_likelihood(theta, X, ys, kernel)
    return lambda theta: sparse_log_likelihood(theta, X, ys, inducing, kernel)


def smoothest_factor(X: np.ndarray, y: np.ndarray, fitted: Hyperparameters, *,
                     prior: Prior, kernel: str = "rbf", inducing: np.ndarray | None = None,
                     max_iter: int = 60) -> float:
    """The longest isotropic lengthscale the data do not reject, as a factor over ``fitted``'s
    (a fit on the same X, y): the largest of :data:`SMOOTHEST_FACTORS` whose profile
    likelihood (max over s2 and noise, no prior) is within :data:`INTERVAL_NATS` of the best
    profile seen (the fit's and those of the factors scanned): the upper end of the
    likelihood-ratio 95% interval, on that grid (1 if none). Of the lengthscales the data
    allow, the smoothest has the smallest information gain gamma_T, which scales GP-UCB's
    regret bounds. The scan stops at the first rejected factor: a few 2-parameter fits.

    The reference is a maximum over lengthscales at or above the fit's: where the prior or a
    refit's trust region (REFIT_TRUST) holds the fit above a shorter maximum-likelihood
    lengthscale, the interval is measured within what the refit may move to, not from that
    maximum. With ``inducing`` the profile is Titsias' bound, whose trace term shrinks as the
    lengthscale grows: with fewer inducing points than rows it accepts longer lengthscales
    than the exact likelihood would (in the 20-d benchmarks the dictionary holds every arm
    the fit sees, and the two agree)."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ys, scale = standardised(y)
    likelihood = _likelihood(X, ys, kernel, inducing)
    log_ell = np.log(np.asarray(fitted.lengthscale, dtype=np.float64))
    if len(log_ell) != 1:
        raise ValueError("smoothest_factor takes an isotropic fit")
    nuisance = [np.log([fitted.variance / scale**2, fitted.noise / scale**2])]
    bounds = prior.bounds(1)[1:]
    best = _profile(likelihood, log_ell, nuisance, bounds, max_iter)[0]
    smoothest = 1.0
    if not math.isfinite(best):  # no finite likelihood at the fit itself: no interval
        return smoothest
    for factor in SMOOTHEST_FACTORS:
        profile = _profile(likelihood, log_ell + math.log(factor), nuisance, bounds, max_iter)[0]
        if profile < best - INTERVAL_NATS:
            break
        best, smoothest = max(best, profile), factor
    return smoothest


#: :func:`smoothest_factor`'s interval: chi2_1's 95% quantile / 2 (Wilks), in nats, and
#: the factors over the fit it tries.
INTERVAL_NATS = 1.92
SMOOTHEST_FACTORS: tuple[float, ...] = (1.25, 1.5, 2.0, 2.5, 3.0, 4.0)


#: L-BFGS-B stops at a relative change of the objective below FIT_FTOL (scipy's default: 2.2e-9;
#: its gradient tolerance stays); GSSBO's fits too (about 1e-3 nats at 10^3 points, where the
#: default walked the flat valley of (s2, noise) for 15-20 more O(n^3) evaluations). 5-35% fewer
#: evaluations than the default with the same decisions; looser settings left the incumbent's
#: profile likelihood 0.7 nats short, a wrong BIC gain (``benchmarks/refit_cost.py``).
FIT_FTOL = 1e-6


def lbfgs_options(max_iter: int) -> dict[str, float]:
    """The L-BFGS-B options of every likelihood fit (:data:`FIT_FTOL`)."""
    return {"maxiter": max_iter, "ftol": FIT_FTOL}


def map_objective(likelihood: Objective, prior: Prior) -> Objective:
    """theta -> minus (log likelihood + log prior) and its gradient, the objective of every MAP
    fit; 1e25 (gradient 0) where the likelihood is not finite, so L-BFGS-B backs off."""

    def negative(theta: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = likelihood(theta)
        if not math.isfinite(value):
            return 1e25, np.zeros_like(theta)
        p_value, p_grad = prior.log_density(theta)
        return -(value + p_value), -(grad + p_grad)

    return negative


def minimize_from(objective: Objective, starts: list[np.ndarray],
                  bounds: list[tuple[float, float]],
                  max_iter: int) -> tuple[optimize.OptimizeResult, int]:
    """The best L-BFGS-B run of ``objective`` from each of ``starts`` (clipped into ``bounds``;
    the first of equal ones) and the evaluations of all runs."""
    low, high = np.array(bounds).T
    runs = [optimize.minimize(objective, np.clip(x0, low, high), jac=True, method="L-BFGS-B",
                              bounds=bounds, options=lbfgs_options(max_iter))
            for x0 in starts]
    return min(runs, key=lambda run: run.fun), sum(int(run.nfev) for run in runs)


def _profile(likelihood: Objective, log_lengthscale: np.ndarray, starts: list[np.ndarray],
             bounds: list[tuple[float, float]], max_iter: int) -> tuple[float, int]:
    """max over (log s2, log noise) of the likelihood at fixed lengthscales (no prior), and the
    number of evaluations: the incumbent's profile likelihood, for the gain of a fit (-inf if
    the likelihood is not finite anywhere the fits went)."""

    def negative(nuisance: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = likelihood(np.concatenate([log_lengthscale, nuisance]))
        return (-value, -grad[-2:]) if math.isfinite(value) else (1e25, np.zeros(2))

    best, evaluations = minimize_from(negative, starts, bounds, max_iter)
    return (-float(best.fun) if best.fun < 1e25 else -math.inf), evaluations


#: Refit schedule: at a batch opening once at least this many observations are folded in and
#: their number has grown by REFIT_GROWTH since the last fit (about log(T / 10) / log 1.5 fits).
REFIT_MIN_OBSERVATIONS = 10
REFIT_GROWTH = 1.5
#: ... and at least this many distinct arms observed (the fit uses one mean value per arm).
REFIT_MIN_ARMS = 20


def refit_due(fitted_at: int, n_observed: int) -> bool:
    """Whether a batch opening with ``n_observed`` observations refits (last fit at fitted_at)."""
    return n_observed >= max(REFIT_MIN_OBSERVATIONS, REFIT_GROWTH * fitted_at)


#: A fitted regulariser is at least this fraction of the configured lam: early fits on a few
#: dozen arms put the noise at 1/100 of its later value (Cadata: lam 0.002 at 35-120 arms, 0.02-0.05
#: from 300 on) and the strategy then explored far too widely.
LAM_FLOOR = 0.1


#: UCB runs on the kept fit's lengthscales times this factor (the next fit starts from the fit's
#: own values). The MAP from UCB's arms (a few dozen, clustered near the maxima) is shorter than
#: the bandwidth with the least regret (Cadata 2-3 against 4, Levy 1-1.5 against 2-2.5, Branin
#: 0.8-1.1 against 1-2): 1.25 cut the mean regret by 8-22% on four of the issue's problems; 1.5
#: trapped Hartmann-6 at its local maximum more often (benchmarks/hyperparameters.py).
SMOOTHING = 1.25

#: A kept isotropic fit runs the kernel on at least :func:`neighbour_lengthscale` at this
#: correlation, with the configured lam: below it the median candidate tells UCB little about its
#: nearest neighbour, UCB is a bandit of independent arms, and the fit's noise is that of a
#: kernel that interpolates any values (at LAM_FLOOR, UCB proposed a new arm at almost every
#: step). Before any kept fit, an isotropic fit below it that BIC does not keep moves the kernel
#: from the start to it (Strategy._refit): in 20 d the fits stay insignificant for 120-190
#: observations while UCB on the start proposes new arms as if uniform. It binds only where
#: candidates are sparse: in 20 dimensions (2000 candidates: 4.1, where the fits give 1.6-2.8),
#: not on the issue's problems (Cadata 0.34, Hartmann-6 1.0 against kernels of 1-4). Against 0.5
#: it cut the 20-d regret by up to 3.6x and cost branin10's one lengthscale 17%
#: (benchmarks/hyperparameters.py).
NEIGHBOUR_CORRELATION = 0.7

#: The automatic kernel starts on the neighbour floor instead of the RMS distance when
#: the floor exceeds this fraction of it: where the candidates are so sparse that a candidate's
#: nearest neighbour is nearly as far as any other (2000 candidates: floor / RMS 0.65 in 20 d,
#: 0.83 in 52 and 100 d; 0.43 on branin10, 0.29 on Hartmann-6, under 0.2 on the issue's other
#: problems). There every fit on the first 20 arms lies below the floor and moved the kernel to
#: it anyway, after 20 arms of UCB on the far smoother start (Rastrigin-20: regret 0.54 -> 0.20;
#: benchmarks/hyperparameters.py). ARD as well: its first fits are isotropic (BIC on 20 arms).
FLOOR_START_RATIO = 0.5

#: After the first kept fit, a refit keeps each lengthscale within this factor of the last kept
#: fit's (lengthscales the data move further get there a factor REFIT_TRUST per refit). Late
#: fits see UCB's arms clustered near a maximum, nearly flat and noisy: on Levy-20 (seed 0) one
#: at 936 observations jumped from 1.6 to 13 and the regret ratio went from 0.33 to 0.83. The
#: first fit is free: held within 2x of the start, Hartmann-6 (MAP ~0.94, start 3.46) tripled
#: its regret (benchmarks/hyperparameters.py).
REFIT_TRUST = 2.0


#: ``ard: "auto"`` (the default) keeps one lengthscale per dimension only where their evidence
#: beats the single lengthscale's by this many times BIC's price of the d - 1 extra
#: parameters: inputs the values ignore, where one lengthscale cannot be long in those and short
#: in the others. On 60 uniform arms of branin10 (Branin plus 8 uniform columns) the gain is
#: 100 nats against a price of 18, on Cadata, Hartmann-6 and Levy-4 (200 arms) 1.2-2.8 times
#: the price; BIC alone (``ard: true``) chose ARD on Cadata's real inputs too (+30% regret),
#: 4x halves branin10's regret and leaves the other problems within 2%
#: (benchmarks/hyperparameters.py).
ARD_MARGIN = 4.0


def fitted_lam(fitted: Hyperparameters, configured: float) -> float:
    """The regulariser of a fitted GP: lam = noise / signal variance (the kernel's variance is
    1 in the engine), between LAM_FLOOR * configured and configured."""
    return float(min(configured, max(LAM_FLOOR * configured, fitted.noise / fitted.variance)))


#: Where a batch's lengthscales come from: the config's kernel ("fixed"), the RMS distance
#: before any fit is kept ("start"), the neighbour floor, where a fit, kept or not, put a single
#: lengthscale below it or the candidates are too sparse for the RMS start
#: (:data:`FLOOR_START_RATIO`) ("floor"), or the kept fit's ("fit": SMOOTHING times its
#: lengthscales, or, where that is below the floor, :func:`smoothest_factor` above it).
SOURCES: tuple[str, ...] = ("fixed", "start", "floor", "fit")


def _source(value: object) -> str | None:
    if value is not None and value not in SOURCES:
        raise ValueError(f"source must be one of {list(SOURCES)} or null, got {value!r}")
    return value  # type: ignore[return-value]


def _positive(name: str, value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return number


def _optional(name: str, value: object) -> float | None:
    return None if value is None else _positive(name, value)


@dataclass(frozen=True)
class KernelState:
    """The hyper-parameters one batch uses; persisted with the batch so a restore installs them.

    ``lengthscale``: 1 value (isotropic) or d (ARD), in the engine's (normalised) units: the
    RMS distance (:func:`rms_distance`) before a fit is kept (on sparse candidates the floor,
    :data:`FLOOR_START_RATIO`), then ``smoothing`` times the kept fit's: SMOOTHING, or on
    sparse candidates, where that is below :func:`neighbour_lengthscale`, the factor of
    :func:`smoothest_factor` if it reaches the floor, else the floor (with smoothing
    SMOOTHING: the next fit starts from the floor / SMOOTHING, as before the factor was stored);
    ``lam``: the regulariser (auto: :func:`fitted_lam` of the last accepted fit, else the
    configured one, also on the neighbour floor); ``variance`` and ``noise``: the last accepted
    fit's signal and noise variance in the values' own units (the fit runs on the values as
    the model sees them, ``normalize_values``, and its variances are multiplied back by the
    scale squared; a later fit on another scale starts from them divided by its own; None
    before a fit); ``fitted_at``: observations at the last fit (0 before it; a fit
    that BIC does not prefer to white noise keeps the values); ``source``: where the
    lengthscales come from (:data:`SOURCES`; None in states stored before it was recorded);
    ``smoothing``: what the next refit divides the kernel's lengthscales by to start from
    (:attr:`fitted_lengthscale`): on "fit" states the kernel's over the kept fit's, on the
    floor after a kept fit SMOOTHING (the start floor / SMOOTHING, as before it was recorded);
    None without a kept fit; SMOOTHING in states with a fit stored before it was recorded.
    """

    lengthscale: tuple[float, ...]
    lam: float
    variance: float | None = None
    noise: float | None = None
    fitted_at: int = 0
    source: str | None = None
    smoothing: float | None = None

    @property
    def fitted_lengthscale(self) -> tuple[float, ...]:
        """The next refit's start: the kernel's lengthscales over ``smoothing`` (on "fit"
        states the kept fit's own lengthscales)."""
        factor = SMOOTHING if self.smoothing is None else self.smoothing
        return tuple(v / factor for v in self.lengthscale)

    def to_dict(self) -> dict[str, object]:
        return {"lengthscale": list(self.lengthscale), "lam": self.lam,
                "variance": self.variance, "noise": self.noise, "fitted_at": self.fitted_at,
                "source": self.source, "smoothing": self.smoothing}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> KernelState:
        try:
            lengthscale = tuple(_positive("lengthscale", v)  # none for a linear kernel
                                for v in data["lengthscale"])  # type: ignore[union-attr]
            return cls(lengthscale, _positive("lam", data["lam"]),
                       _optional("variance", data.get("variance")),  # values: |v| <= 1e100
                       _optional("noise", data.get("noise")),
                       int(data.get("fitted_at", 0)),  # type: ignore[call-overload]
                       _source(data.get("source")),
                       _optional("smoothing", data.get(
                           "smoothing", None if data.get("variance") is None else SMOOTHING)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"malformed stored hyper-parameters {data!r}: {exc}",
                              field="hyperparameters") from exc
