"""GSSBO (Wei et al., "Gradient-based Sample Selection for Faster Bayesian Optimization"): GP-UCB
whose GP is fitted on a buffer U of M observations instead of all of them (paper Alg. 1).

At every batch opening, from the observations folded so far (in record order t):

1. Pilot (Zhu et al.'s "pilot estimate", the paper's ref. [44]): P = the n0 initial points and the
   M - n0 newest ones; Matern-5/2 hyper-parameters by maximum likelihood (MAP with
   :class:`hyperparameters.Prior`) on P.
2. Buffer (Alg. 1 lines 12-14): U = the n0 initial points, the newest point, and M - n0 - 1 more
   chosen by ``selection`` (below); with M >= N every point is kept and GSSBO is GP-UCB.
3. Posterior: an exact GP (:class:`ExactPosterior`, Matern-5/2 with the hyper-parameters refitted
   on U from the pilot's values) on U plus the pending selections, which enter the variance only
   (hallucination, as GP-BUCB); UCB over the candidate set.

Fits (shared by GSSBO and GP-UCB-ML, i.e. M = None): a full fit (the prior centre and
``restarts`` random starts, best L-BFGS-B run) only on the *anchor*, the first
``FULL_FIT_EVERY * floor(N / FULL_FIT_EVERY)`` observations (every step while N < 100); at the
other steps one L-BFGS-B run from the anchor's values on the step's own data. The anchor is a
pure function of that prefix (its generator is seeded by it), so a rebuilt strategy recomputes
it and replays exactly; the live model keeps the last one. Each evaluation is one Cholesky with
Sigma^-1 by ``potri`` (:func:`likelihoods.exact_log_likelihood`, the distances computed once
per fit), and L-BFGS-B stops at a relative change of ``hyperparameters.FIT_FTOL``. The posterior
is built in one blocked factorisation (:meth:`GSSPosterior._factor_observed`). Before (a full
:func:`hyperparameters.fit` per step: three starts, O(n^3) ``cho_solve(L, I)``, a profile
likelihood GSSBO never read; a row-by-row posterior) GP-UCB-ML on Hartmann-6
(benchmarks/literature.py, A = 2000) had used 33 CPU s at t = 300; now 10-11 s.

Selection rules (``gssbo_selection``; paper eq. (1): minimum summed pairwise cosine similarity of
the gradients, greedily, each normalised gradient perturbed by N(0, noise^2) per coordinate):

- ``"gradient"`` (default): a vector form of Aljundi et al.'s sample gradients for the pilot GP,
  g_i = r_i z_i with r_i = y_i - mu_P(x_i) and z_i = L_P^-1 k_P(x_i) (the gradient of the squared
  loss of sample i wrt the pilot's whitened representer weights), O(N |P|^2).
- ``"column"``: the appendix's "gradient columns" psi_i = (K_DD + noise I)^-1 e_i over all N
  points (pilot hyper-parameters), O(N^3).
- ``"scalar"``: the paper's eq. (3), g_i = -[(K_DD + noise I)^-1 (y - mu)]_i, a scalar, so the
  cosine similarity is only a sign test (kept for comparison), O(N^3).
- ``"random"``: a uniform subset (the paper's RSSBO control).

Every choice is a deterministic function of the records and ``rng`` (seeded per batch), so a
restored strategy rebuilds the same buffer. The paper's time rule (switch to a buffer of the
current size once an iteration takes Z times the first ones) is :class:`TimeRule`; wall-clock
time is not reproducible, so a study using it does *not* replay exactly after a restore.
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from .autokernel import KernelState
from .errors import NumericalError
from .exact import ExactPosterior
from .hyperparameters import Hyperparameters, Prior, map_objective, minimize_from, standardised
from .kernels import Matern52
from .likelihoods import exact_log_likelihood, squared_distances
from .normalize import choose_scaling
from .nystrom import jittered_cholesky
from .spacing import median_distance


# ------------------------------------------------------------------ gradients (paper Sec. 4.1)
def _factor(X: np.ndarray, hp: Hyperparameters) -> tuple[Matern52, np.ndarray]:
    kernel = Matern52(hp.lengthscale[0], hp.variance)
    K = kernel(X, X)
    K[np.diag_indices_from(K)] += hp.noise
    return kernel, jittered_cholesky(K, "GSSBO's pilot kernel matrix")


def pilot_gradients(X: np.ndarray, y: np.ndarray, pilot: np.ndarray,
                    hp: Hyperparameters) -> np.ndarray:
    """g_i = (y_i - mu_P(x_i)) L_P^-1 k_P(x_i), shape (N, |P|) (rule "gradient")."""
    kernel, L = _factor(X[pilot], hp)
    Z = linalg.solve_triangular(L, kernel(X[pilot], X), lower=True)  # (|P|, N)
    mean = Z.T @ linalg.solve_triangular(L, y[pilot], lower=True)
    return (y - mean)[:, None] * Z.T


def column_gradients(X: np.ndarray, y: np.ndarray, hp: Hyperparameters,
                     scalar: bool) -> np.ndarray:
    """Columns of (K + noise I)^-1 (appendix A.1), or eq. (3)'s scalars -(K + noise I)^-1 y."""
    _, L = _factor(X, hp)
    if scalar:
        return -linalg.cho_solve((L, True), y)[:, None]
    return linalg.cho_solve((L, True), np.eye(len(y)))


def diverse_subset(gradients: np.ndarray, forced: np.ndarray, size: int,
                   rng: np.random.Generator, noise: float) -> np.ndarray:
    """Greedy minimum summed pairwise cosine similarity (eq. (1)): ``forced`` plus ``size`` more.

    Each gradient is normalised, perturbed by N(0, noise^2) per coordinate (paper Sec. 4.3 (3))
    and normalised again; ties go to the lowest index.
    """
    G = gradients / np.maximum(np.linalg.norm(gradients, axis=1, keepdims=True), 1e-300)
    G = G + noise * rng.standard_normal(G.shape)
    G /= np.maximum(np.linalg.norm(G, axis=1, keepdims=True), 1e-300)
    free = np.ones(len(G), dtype=bool)
    free[forced] = False
    score = G @ G[forced].sum(axis=0)  # summed cosine similarity to the chosen set
    chosen = list(forced)
    for _ in range(size):
        j = int(np.argmin(np.where(free, score, np.inf)))
        chosen.append(j)
        free[j] = False
        score += G @ G[j]
    return np.asarray(chosen, dtype=np.int64)


# ------------------------------------------------------------------ buffer (paper Alg. 1)
@dataclass(frozen=True)
class Buffer:
    """Positions (into the observed records, in t order) of the pilot set P and the buffer U."""

    pilot: np.ndarray
    buffer: np.ndarray


def pilot_set(n: int, initial: int, size: int | None) -> np.ndarray:
    """Positions of P: the n0 initial and the ``size - n0`` newest of n observations (all if
    ``size`` is None or >= n)."""
    if size is None or size >= n:
        return np.arange(n)
    n0 = min(initial, size - 1)
    return np.concatenate([np.arange(n0), np.arange(n - (size - n0), n)])


def select_buffer(X: np.ndarray, y: np.ndarray, initial: int, size: int | None,
                  selection: str, hp: Hyperparameters, rng: np.random.Generator,
                  noise: float) -> Buffer:
    """The n0 initial points, the newest point and ``size - n0 - 1`` chosen by ``selection``.

    ``X`` (N, d) and standardised ``y`` (N,) are the observations in record order; ``hp`` the
    pilot's hyper-parameters (units of y). With ``size`` None or >= N every point is kept.
    """
    n = len(y)
    everything = np.arange(n)
    pilot = pilot_set(n, initial, size)
    if size is None or size >= n:
        return Buffer(pilot, everything)
    n0 = min(initial, size - 1)
    forced = np.append(everything[:n0], n - 1)
    extra = size - len(forced)
    if selection == "random":
        rest = everything[n0 : n - 1]
        picked = np.sort(rng.choice(rest, size=extra, replace=False))
        return Buffer(pilot, np.concatenate([forced, picked]))
    if selection == "gradient":
        gradients = pilot_gradients(X, y, pilot, hp)
    else:
        gradients = column_gradients(X, y, hp, scalar=selection == "scalar")
    return Buffer(pilot, np.sort(diverse_subset(gradients, forced, extra, rng, noise)))


# ------------------------------------------------------------------ posterior
class GSSPosterior(ExactPosterior):
    """Exact Matern-5/2 GP on the buffer (+ pending, variance only), in the data's units.

    ``mean`` is in the units of the observations; ``variance_start`` / :meth:`variance` are
    sigma^2(x) / noise (the engine's scaling: GP-BUCB's rule reads them directly).
    """

    def __init__(self, candidates: np.ndarray, hp: Hyperparameters, arms: np.ndarray,
                 values: np.ndarray, pending: np.ndarray, y_mean: float, y_scale: float,
                 buffer: Buffer | None = None, fitted_at: int = 0) -> None:
        """``hp`` is in units of ``y_scale``; the GP models (values - y_mean) / y_scale.
        ``fitted_at``: the observations ``hp`` was fitted on (0: the default values)."""
        super().__init__(Matern52(hp.lengthscale[0], hp.variance), candidates, hp.noise)
        self.hyperparameters, self.buffer = hp, buffer
        #: what the batch records and the API shows: lengthscale on the unit-scaled candidates,
        #: lam = noise / signal variance, the variances in the values' units
        self.kernel_state = KernelState(
            hp.lengthscale, hp.noise / hp.variance, hp.variance * y_scale**2,
            hp.noise * y_scale**2, fitted_at, "fit" if fitted_at else "start",
            1.0 if fitted_at else None)
        self.y_mean, self.y_scale = y_mean, y_scale
        self._factor_observed(np.asarray(arms, dtype=np.int64))
        for arm in pending:
            self.add_pending(int(arm))
        self.open_batch(np.arange(len(arms)), (values - self.y_mean) / self.y_scale)
        self.mean = self.y_mean + self.y_scale * self.mean

    def _factor_observed(self, arms: np.ndarray) -> None:
        """P = ``arms`` in one blocked Cholesky and triangular solve: the L and W =
        L^-1 K(P, X) that :meth:`ExactPosterior.reset_to` builds row by row (the same O(n^2 A)
        flops, in BLAS-3 instead of n matrix-vector products; the fit changes every step, so
        nothing is reused)."""
        n, cap = len(arms), len(arms) + 16
        K = self._kernel(self._X[arms], self._X[arms])
        K[np.diag_indices_from(K)] += self.lam
        try:
            L = linalg.cholesky(K, lower=True)
        except linalg.LinAlgError as exc:
            raise NumericalError("GSSBO's GP Cholesky failed; try a larger noise",
                                 field="lam") from exc
        self._L, self._W = np.zeros((cap, cap)), np.zeros((cap, len(self._X)))
        self._L[:n, :n] = L
        self._W[:n] = linalg.solve_triangular(L, self._kernel(self._X[arms], self._X),
                                              lower=True)
        self._s2 = np.maximum(self._kdiag - np.einsum("ij,ij->j", self._W[:n], self._W[:n]),
                              0.0)
        self.pulled = arms.tolist()

    def ucb_width(self, beta: float) -> float:
        """alpha such that mean + alpha sqrt(variance) = mu + sqrt(beta) sigma (data units)."""
        return math.sqrt(beta * self.lam) * self.y_scale


def ucb_beta(n_arms: int, t: int, delta: float) -> float:
    """Srinivas et al. (2010) Theorem 1, finite D: beta_t = 2 log(|D| t^2 pi^2 / (6 delta))."""
    return 2.0 * math.log(n_arms * max(t, 1) ** 2 * math.pi**2 / (6.0 * delta))


class TimeRule:
    """The paper's dynamic buffer size (Sec. 4.3 (1)): M = N once a fit takes > Z times the
    average of the first ``warmup`` fits. Wall-clock based: breaks exact replay."""

    def __init__(self, factor: float, warmup: int = 5) -> None:
        self.factor, self.warmup = factor, warmup
        self.seconds: list[float] = []
        self.size: int | None = None

    def record(self, seconds: float, n: int) -> None:
        if self.size is not None:
            return
        if len(self.seconds) >= self.warmup and \
                seconds > self.factor * float(np.mean(self.seconds[: self.warmup])):
            self.size = n
        self.seconds.append(seconds)


# ------------------------------------------------------------------ hyper-parameters
#: Full maximum-likelihood fits (with restarts) run on the data of the last multiple of
#: FULL_FIT_EVERY observations (the anchor; every step below it); each step in between refines
#: the anchor's values on its own data by one local L-BFGS-B run (:func:`map_fit`).
FULL_FIT_EVERY = 100


def anchor_size(n: int) -> int:
    """Number of observations (a prefix in record order) the anchor fit for ``n`` uses."""
    return n if n < FULL_FIT_EVERY else FULL_FIT_EVERY * (n // FULL_FIT_EVERY)


def map_fit(X: np.ndarray, y: np.ndarray, prior: Prior, starts: list[Hyperparameters],
            max_iter: int = 60) -> Hyperparameters:
    """MAP Matern-5/2 hyper-parameters (units of y): the best L-BFGS-B run from ``starts``.

    The objective, bounds and standardisation of :func:`hyperparameters.fit`, without its
    profile likelihood (GSSBO never reads the BIC gain); on constant values the first start.
    """
    ys, scale = standardised(y)
    if not ys.any():  # constant values: nothing to fit
        return starts[0]
    sq_dist = squared_distances(X)
    objective = map_objective(
        lambda theta: exact_log_likelihood(theta, X, ys, "matern52", sq_dist), prior)
    shift = np.array([0.0, 2.0 * math.log(scale), 2.0 * math.log(scale)])
    best, _ = minimize_from(objective, [start.theta - shift for start in starts],
                            prior.bounds(1), max_iter)
    return Hyperparameters.from_theta(best.x + shift)


def prior_starts(prior: Prior, restarts: int, rng: np.random.Generator) -> list[Hyperparameters]:
    """The prior centre and ``restarts`` draws from the prior (:func:`hyperparameters.fit`'s)."""
    centre = prior.centre(1)
    return [Hyperparameters.from_theta(theta) for theta in
            [centre, *(centre + prior.sd * rng.standard_normal(3) for _ in range(restarts))]]


def value_unit(values: np.ndarray) -> float:
    """1, or for values spread over less than 1e-100 a power of two near their spread: the
    anchor fits values / unit, whose variances in the values' own units underflowed (spread
    1e-300: 1e-600, stored as 0, and every ask then failed). Dividing by a power of two is
    exact, so a fit in those units is the same fit."""
    spread = float(np.ptp(values)) if len(values) else 0.0
    if spread == 0.0 or spread > 1e-100:
        return 1.0
    return 2.0 ** math.floor(math.log2(spread))


def rescaled(hp: Hyperparameters, scale: float) -> Hyperparameters:
    """``hp`` for the data divided by ``scale``."""
    return Hyperparameters(hp.lengthscale, hp.variance / scale**2, hp.noise / scale**2)


class GSSBOModel:
    """Builds the batch posterior of GSSBO from the observations and pending selections."""

    def __init__(self, candidates: np.ndarray, *, initial: int, size: int | None,
                 selection: str, gradient_noise: float, restarts: int,
                 time_factor: float | None = None) -> None:
        self.X = choose_scaling(candidates, "unit").apply(candidates)  # [0, 1]^d
        self.initial, self.size, self.selection = initial, size, selection
        self.gradient_noise, self.restarts = gradient_noise, restarts
        self.time_rule = TimeRule(time_factor) if time_factor is not None else None
        self.last: GSSPosterior | None = None
        self._anchor: tuple[tuple[object, ...], Hyperparameters] | None = None

    def buffer_size(self) -> int | None:
        if self.time_rule is not None and self.size is None:
            return self.time_rule.size
        return self.size

    def anchor(self, arms: np.ndarray, values: np.ndarray,
               size: int | None) -> tuple[Hyperparameters, float]:
        """Full fit (``restarts``) on the pilot set of the first :func:`anchor_size`
        observations, in the units of ``values`` / :func:`value_unit` (returned with it); a
        pure function of that prefix (its own seeded generator), so a rebuilt strategy
        recomputes it, and the last one is kept for the next steps."""
        n = anchor_size(len(values))
        arms, values = arms[:n], values[:n]
        key = (n, size, arms.tobytes(), values.tobytes())
        if self._anchor is None or self._anchor[0] != key:
            rng = np.random.default_rng([n, zlib.crc32(arms.tobytes())])
            X, pilot = self.X[arms], pilot_set(n, self.initial, size)
            prior = Prior(lengthscale=median_distance(X, rng))
            starts = prior_starts(prior, self.restarts, rng)
            unit = value_unit(values)
            self._anchor = key, (map_fit(X[pilot], values[pilot] / unit, prior, starts), unit)
        return self._anchor[1]

    def posterior(self, arms: np.ndarray, values: np.ndarray, pending: np.ndarray,
                  rng: np.random.Generator) -> GSSPosterior:
        """arms/values: observations in record order; pending: arms in V_all only."""
        started = time.perf_counter()
        ys, scale = standardised(values) if len(values) else (values, 1.0)
        if len(values) < 3:  # too little data for a likelihood: fixed default values
            hp = Hyperparameters((0.2 * math.sqrt(self.X.shape[1]),), 1.0, 1e-2)
            mean = float(values.mean()) if len(values) else 0.0
            self.last = GSSPosterior(self.X, hp, arms, values, pending, mean, scale)
            return self.last
        X = self.X[arms]
        prior = Prior(lengthscale=median_distance(X, rng))
        size = self.buffer_size()
        pilot = pilot_set(len(values), self.initial, size)
        anchored, unit = self.anchor(arms, values, size)
        hp = rescaled(anchored, scale / unit)
        if anchor_size(len(values)) < len(values):
            hp = map_fit(X[pilot], ys[pilot], prior, [hp])
        buffer = select_buffer(X, ys, self.initial, size, self.selection, hp, rng,
                               self.gradient_noise)
        keep = buffer.buffer
        if not np.array_equal(keep, pilot):  # refit on U, starting from the pilot's values
            hp = map_fit(X[keep], ys[keep], prior, [hp])
        self.last = GSSPosterior(self.X, hp, arms[keep], values[keep], pending,
                                 float(values[keep].mean()), scale, buffer, len(values))
        if self.time_rule is not None:
            self.time_rule.record(time.perf_counter() - started, len(values))
        return self.last
