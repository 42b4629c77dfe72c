"""Kernel hyper-parameters by maximum a posteriori fit of a GP likelihood (:mod:`.likelihoods`).

- :func:`fit`: L-BFGS-B over theta = [log l_1..log l_q, log s2, log noise] with box bounds, a
  weak log-normal prior (:class:`Prior`) and a few restarts from a seeded generator, on y
  standardised to mean 0 and variance 1, with its evidence against white noise and its gain
  over the incumbent lengthscales (BIC decides whether it is kept, :attr:`FitResult.significant`).
- :func:`smoothest_factor`: the longest lengthscale the fit's likelihood does not reject.

When the automatic kernel refits, and what it does with a fit, is :mod:`.autokernel`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .likelihoods import LOG_2PI, Objective, exact_log_likelihood, sparse_log_likelihood
from .normalize import ROUNDING

if TYPE_CHECKING:
    from scipy import optimize

_LOG_RANGE = (math.log(np.finfo(np.float64).tiny), math.log(np.finfo(np.float64).max))


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


@dataclass(frozen=True)
class Prior:
    """Independent weak log-normal priors and box bounds on the log parameters.

    Centres: lengthscale ``lengthscale`` (e.g. :func:`spacing.rms_distance`), signal variance 1 and
    noise variance ``noise`` (y is standardised before fitting). ``sd`` is the prior's standard
    deviation in log space (1: a factor e either way); the bounds are centre * / ``span`` (noise:
    [1e-6, 1]). Defaults chosen with benchmarks/hyperparameters.py (a noise centre of 0.01 instead
    of 0.1 favoured interpolating UCB's few distinct arms with a short lengthscale).
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
    #: the ARD fit's evidence minus the isotropic fit's, where ``ard`` tried one (else None)
    ard_gain: float | None = None

    @property
    def significant(self) -> bool:
        """BIC prefers the fitted GP to white noise, evidence > (q + 1)/2 log n (q lengthscales
        and the signal variance are the extra parameters), or to the incumbent lengthscales,
        gain > q/2 log n: a lengthscale the data contradict is not kept just because the data
        do not yet beat white noise (the start's 3.5 on Hartmann-6, where the
        bound prefers 1 by several nats from ~45 arms on, benchmarks/hyperparameters.md)."""
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
        (d - 1)/2 log n; :data:`autokernel.ARD_MARGIN`), else the isotropic fit: the d prior
        terms pull an ARD MAP towards the prior centre, so that on Hartmann-6 it stayed below
        the BIC threshold against white noise where the isotropic fit was far above.
    inducing : ndarray of shape (m, d) -> Titsias' sparse bound, O(n m^2) per evaluation;
        None -> exact likelihood, O(n^3).
    start : first starting point (e.g. the current values); the others are the prior centre and
        ``restarts`` draws from the prior, clipped to the bounds.
    trust : with ``start``, each lengthscale stays within a factor ``trust`` of start's (a trust
        region on top of the prior's bounds), else None. A refit (both given) starts from
        ``start`` alone (plus ``restarts``): the prior centre, clipped into the region, ended
        at the incumbent's optimum within 1e-6 nats on every refit checked (Hartmann-6,
        Cadata, seed 0) for 11-19 of about 35 evaluations; without it the fits cost 25-44%
        less CPU with the regret ratios within 2% (benchmarks/hyperparameters.md).
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
        ard_gain = full.evidence - chosen.evidence
        if ard_gain > ard_margin * bic_penalty(d - 1, n):
            chosen = full
        chosen = replace(chosen, evaluations=evaluations, ard_gain=ard_gain)
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
    evidence = log_likelihood + 0.5 * n * (1.0 + LOG_2PI)  # minus N(0, 1)'s, on ys
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
    fitted = result.evidence - 0.5 * n * (1.0 + LOG_2PI)  # the fit's log likelihood
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
    refit's trust region (autokernel.REFIT_TRUST) holds the fit above a shorter maximum-likelihood
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
    from scipy import optimize  # imported on the first fit: a third of the engine's import time

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
