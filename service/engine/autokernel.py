"""The automatic kernel's rules: when a study refits (:func:`refit_due`), what a fit makes of
the kernel (:func:`after_fit`, with the constants below and :func:`fitted_lam`) and the state
each batch runs on (:class:`KernelState`, persisted with the batch); and a strategy's use of
them over its candidates (:class:`KernelTuner`: the first batch's state, the kernel a state
gives, the refit at a batch opening). The fits are :mod:`.hyperparameters`'s, the start and
floor :mod:`.spacing`'s."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from .config import EXACT_STRATEGIES, NO_KERNEL_STRATEGIES, EngineConfig
from .errors import ConfigError
from .hyperparameters import FitResult, Hyperparameters, Prior, fit, smoothest_factor, subsample
from .kernels import PARAMETER_RANGE, Kernel, make_kernel
from .spacing import neighbour_lengthscale, rms_distance

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
#: trapped Hartmann-6 at its local maximum more often (benchmarks/hyperparameters.md).
SMOOTHING = 1.25


#: A kept isotropic fit runs the kernel on at least :func:`spacing.neighbour_lengthscale` at this
#: correlation, with the configured lam: below it the median candidate tells UCB little about its
#: nearest neighbour, UCB is a bandit of independent arms, and the fit's noise is that of a
#: kernel that interpolates any values (at LAM_FLOOR, UCB proposed a new arm at almost every
#: step). Before any kept fit, an isotropic fit below it that BIC does not keep moves the kernel
#: from the start to it (:func:`after_fit`): in 20 d the fits stay insignificant for 120-190
#: observations while UCB on the start proposes new arms as if uniform. It binds only where
#: candidates are sparse: in 20 dimensions (2000 candidates: 4.1, where the fits give 1.6-2.8),
#: not on the issue's problems (Cadata 0.34, Hartmann-6 1.0 against kernels of 1-4). Against 0.5
#: it cut the 20-d regret by up to 3.6x and cost branin10's one lengthscale 17%
#: (benchmarks/hyperparameters.md).
NEIGHBOUR_CORRELATION = 0.7


#: The automatic kernel starts on the neighbour floor instead of the RMS distance when
#: the floor exceeds this fraction of it: where the candidates are so sparse that a candidate's
#: nearest neighbour is nearly as far as any other (2000 candidates: floor / RMS 0.65 in 20 d,
#: 0.83 in 52 and 100 d; 0.43 on branin10, 0.29 on Hartmann-6, under 0.2 on the issue's other
#: problems). There every fit on the first 20 arms lies below the floor and moved the kernel to
#: it anyway, after 20 arms of UCB on the far smoother start (Rastrigin-20: regret 0.54 -> 0.20;
#: benchmarks/hyperparameters.md). ARD as well: its first fits are isotropic (BIC on 20 arms).
FLOOR_START_RATIO = 0.5


#: After the first kept fit, a refit keeps each lengthscale within this factor of the last kept
#: fit's (lengthscales the data move further get there a factor REFIT_TRUST per refit). Late
#: fits see UCB's arms clustered near a maximum, nearly flat and noisy: on Levy-20 (seed 0) one
#: at 936 observations jumped from 1.6 to 13 and the regret ratio went from 0.33 to 0.83. The
#: first fit is free: held within 2x of the start, Hartmann-6 (MAP ~0.94, start 3.46) tripled
#: its regret (benchmarks/hyperparameters.md).
REFIT_TRUST = 2.0


#: ``ard: "auto"`` (the default) keeps one lengthscale per dimension only where their evidence
#: beats the single lengthscale's by this many times BIC's price of the d - 1 extra
#: parameters: inputs the values ignore, where one lengthscale cannot be long in those and short
#: in the others. On 60 uniform arms of branin10 (Branin plus 8 uniform columns) the gain is
#: 100 nats against a price of 18, on Cadata, Hartmann-6 and Levy-4 (200 arms) 1.2-2.8 times
#: the price; BIC alone (``ard: true``) chose ARD on Cadata's real inputs too (+30% regret),
#: 4x halves branin10's regret and leaves the other problems within 2%
#: (benchmarks/hyperparameters.md).
ARD_MARGIN = 4.0


#: While the kernel is isotropic, a refit whose ARD try BIC rejected tries again once the arms
#: reach those at which ARD_RETRY_OPTIMISM times its gain, grown in proportion to the arms,
#: would pass, and at the latest once they have grown by ARD_RETRY_GROWTH (:func:`next_ard_try`).
#: A rejected ARD fit (d + 2 parameters, from the isotropic optimum) took 27-32 of a refit's
#: 30-37 evaluations at d = 8, where UCB pulls the same few dozen arms from one refit to the
#: next: 13 -> 5 ms per refit there, fits' CPU -30 to -40% on five of the issue's problems with
#: the same regret. Without the optimism factor (gains grow faster than the arms while the
#: inputs the values ignore come to light), branin10's ARD came later: +6% regret, +23% with
#: a plain doubling; +1% with it (benchmarks/refit_cost.py, benchmarks/hyperparameters.md).
ARD_RETRY_GROWTH = 2.0
ARD_RETRY_OPTIMISM = 2.0


def next_ard_try(gain: float, arms: int, dim: int, margin: float, rows: int | None = None) -> int:
    """The distinct arms at which an isotropic kernel next tries ARD, after a try on ``arms``
    whose evidence beat the isotropic fit's by ``gain`` nats against a threshold of ``margin``
    times BIC's price of the d - 1 extra lengthscales (:data:`ARD_MARGIN`): the first arm count
    n at which ARD_RETRY_OPTIMISM * gain * n / arms reaches that price (a real difference
    between the dimensions adds evidence in proportion to the data), at most
    ARD_RETRY_GROWTH * arms. ``rows``: the rows the fit saw, if it subsampled the arms (its
    gain then does not grow with them: the latest try)."""
    last = max(int(ARD_RETRY_GROWTH * arms), arms + 1)
    if gain <= 0 or (rows is not None and rows < arms):
        return last
    n = np.arange(arms + 1, last + 1)
    reached = np.flatnonzero(ARD_RETRY_OPTIMISM * gain * n / arms
                             >= margin * 0.5 * (dim - 1) * np.log(n))
    return int(n[reached[0]]) if len(reached) else last


def ard_due(state: KernelState, arms: int) -> bool:
    """Whether a refit on ``arms`` distinct arms tries ARD (with ``ard`` on): always on an ARD
    kernel (the refit keeps it or returns to one lengthscale), else once the arms reach
    :attr:`KernelState.ard_retry_at` (:func:`next_ard_try`)."""
    return len(state.lengthscale) > 1 or arms >= state.ard_retry_at


def fitted_lam(fitted: Hyperparameters, configured: float) -> float:
    """The regulariser of a fitted GP: lam = noise / signal variance (the kernel's variance is
    1 in the engine), between LAM_FLOOR * configured and configured."""
    return float(min(configured, max(LAM_FLOOR * configured, fitted.noise / fitted.variance)))


#: Where a batch's lengthscales come from: the config's kernel ("fixed"), the RMS distance before
#: any fit is kept ("start"), the neighbour floor, where a fit, kept or not, put a single
#: lengthscale below it or the candidates are too sparse for the RMS start
#: (:data:`FLOOR_START_RATIO`) ("floor"), or the kept fit's ("fit": SMOOTHING times its
#: lengthscales, or, where that is below the floor, :func:`hyperparameters.smoothest_factor` above
#: it).
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


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _optional(name: str, value: object) -> float | None:
    return None if value is None else _positive(name, value)


@dataclass(frozen=True)
class KernelState:
    """The hyper-parameters one batch uses; persisted with the batch so a restore installs them.

    ``lengthscale``: 1 value (isotropic) or d (ARD), in the engine's (normalised) units: the RMS
    distance (:func:`spacing.rms_distance`) before a fit is kept (on sparse candidates the floor,
    :data:`FLOOR_START_RATIO`), then ``smoothing`` times the kept fit's: SMOOTHING, or on sparse
    candidates, where that is below :func:`spacing.neighbour_lengthscale`, the factor of
    :func:`hyperparameters.smoothest_factor` if it reaches the floor, else the floor (with smoothing
    SMOOTHING: the next fit starts from the floor / SMOOTHING, as before the factor was stored);
    ``lam``: the regulariser (auto: :func:`fitted_lam` of the last accepted fit, else the configured
    one, also on the neighbour floor); ``variance`` and ``noise``: the last accepted fit's signal
    and noise variance in the values' own units (the fit runs on the values as the model sees them,
    ``normalize_values``, and its variances are multiplied back by the scale squared; a later fit on
    another scale starts from them divided by its own; None before a fit); ``fitted_at``:
    observations at the last fit (0 before it; a fit that BIC does not prefer to white noise keeps
    the values); ``source``: where the lengthscales come from (:data:`SOURCES`; None in states
    stored before it was recorded); ``smoothing``: what the next refit divides the kernel's
    lengthscales by to start from (:attr:`fitted_lengthscale`): on "fit" states the kernel's over
    the kept fit's, on the floor after a kept fit SMOOTHING (the start floor / SMOOTHING, as before
    it was recorded); None without a kept fit; SMOOTHING in states with a fit stored before it was
    recorded; ``ard_retry_at``: the distinct arms from which a refit of an isotropic kernel
    tries one lengthscale per dimension (:func:`next_ard_try`; 0 before the first try, in
    states stored before it was recorded, and where none is ever tried: ``ard: false``, a
    fixed kernel, GSSBO's fits).
    """

    lengthscale: tuple[float, ...]
    lam: float
    variance: float | None = None
    noise: float | None = None
    fitted_at: int = 0
    source: str | None = None
    smoothing: float | None = None
    ard_retry_at: int = 0

    @property
    def fitted_lengthscale(self) -> tuple[float, ...]:
        """The next refit's start: the kernel's lengthscales over ``smoothing`` (on "fit"
        states the kept fit's own lengthscales)."""
        factor = SMOOTHING if self.smoothing is None else self.smoothing
        return tuple(v / factor for v in self.lengthscale)

    def to_dict(self) -> dict[str, object]:
        return {"lengthscale": list(self.lengthscale), "lam": self.lam,
                "variance": self.variance, "noise": self.noise, "fitted_at": self.fitted_at,
                "source": self.source, "smoothing": self.smoothing,
                "ard_retry_at": self.ard_retry_at}

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
                           "smoothing", None if data.get("variance") is None else SMOOTHING)),
                       _count("ard_retry_at", data.get("ard_retry_at", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"malformed stored hyper-parameters {data!r}: {exc}",
                              field="hyperparameters") from exc


def after_fit(current: KernelState, result: FitResult, *, n_observed: int, scale: float,
              floor: float, lam: float,
              smoothest: Callable[[Hyperparameters], float]) -> KernelState:
    """The kernel a batch runs on after a refit on ``n_observed`` observations (README, steps
    5-7): ``current`` where BIC does not keep ``result`` (:attr:`FitResult.significant`),
    else SMOOTHING times its lengthscales with :func:`fitted_lam` of its variances.

    ``result`` is fitted on the values as the model sees them, divided by ``scale``; ``floor`` is
    the isotropic kernel's :data:`NEIGHBOUR_CORRELATION` lengthscale (0 for ARD, which has none),
    ``lam`` the configured regulariser and ``smoothest(fitted)`` the largest factor over the fit's
    lengthscale its likelihood does not reject (:func:`hyperparameters.smoothest_factor` on the
    fit's data). An isotropic kernel below the floor runs on the smoothest lengthscale if that
    reaches the floor, else on the floor with the configured lam (a fit that short interpolates any
    values). Before any kept fit, an unkept isotropic fit below the floor moves the kernel from a
    longer start down to the floor: noise on the candidates' spacing says the start is far too
    smooth.
    """
    fitted = result.hyperparameters
    variance, noise = fitted.variance * scale**2, fitted.noise * scale**2  # values' units
    lengthscale = tuple(SMOOTHING * v for v in fitted.lengthscale)
    below_floor = lengthscale[0] < floor  # isotropic only: ARD's floor is 0
    if not result.significant:
        if current.variance is None and below_floor and floor < current.lengthscale[0]:
            return replace(current, lengthscale=(floor,), fitted_at=n_observed, source="floor")
        return replace(current, fitted_at=n_observed)
    if below_floor:
        factor = smoothest(fitted)  # levy20-shifted, benchmarks/hyperparameters.md
        if factor * fitted.lengthscale[0] >= floor:
            return KernelState((factor * fitted.lengthscale[0],), fitted_lam(fitted, lam),
                               variance, noise, n_observed, "fit", factor)
        return KernelState((floor,), lam, variance, noise, n_observed, "floor", SMOOTHING)
    return KernelState(lengthscale, fitted_lam(fitted, lam), variance, noise, n_observed, "fit",
                       SMOOTHING)


#: Until a fit has been kept, and up to this many distinct observed arms, the sparse strategies
#: fit by the exact likelihood: Titsias' bound with a dictionary drawn at the (often too long)
#: start is far below the exact likelihood at shorter lengthscales, which a few
#: atoms cannot express, so the refit never left the start (Levy-20: 6.3 to T = 1000 where
#: GP-BUCB fits 1.7). Exact costs O(n^3) per evaluation, a few ms at this size.
EXACT_FIT_ARMS = 300
#: At most this many dictionary atoms are the inducing points of a sparse fit: a warm start of
#: 10^5 replicated observations draws a dictionary of ~300 atoms at q-bar 8, and the fit on all
#: of them took 15 s (the first ask's whole cost; resparsifying takes 0.1 s).
FIT_INDUCING = 128


class KernelTuner:
    """A strategy's kernel hyper-parameters over its candidates: the state of its first batch
    (:meth:`initial_state`), the kernel and view of the candidates a state gives
    (:meth:`kernel_for`) and the refit at a batch opening (:meth:`refit`).

    ``normalized``: ndarray of shape (A, d), the candidates as the kernel sees them (the
    config's ``normalize``). The start and the floor are computed at their first use, once: a
    restore installs its stored state and needs neither until it refits."""

    def __init__(self, config: EngineConfig, normalized: np.ndarray) -> None:
        self.config, self.normalized = config, normalized
        #: whether the strategy refits its kernel (uniform has no model; GSSBO and GO-UCB fit
        #: their own)
        self.fits = (config.hyperparameters == "auto"
                     and config.strategy not in NO_KERNEL_STRATEGIES)
        # computed on first use (plain attributes: Python 3.11's functools.cached_property
        # holds one lock for every instance, so studies would wait on each other's floor)
        self._start: float | None = None
        self._floor: float | None = None

    def start_lengthscale(self) -> float:
        """The automatic start and prior centre: :func:`rms_distance` of the normalised
        candidates."""
        if self._start is None:
            self._start = rms_distance(self.normalized)
        return self._start

    def neighbour_floor(self) -> float:
        """The floor of an isotropic fit's kernel (:data:`NEIGHBOUR_CORRELATION`), computed
        once (O(200 A d): 1.9 s at A = 10^6, d = 50): for a new automatic strategy's start
        (:data:`FLOOR_START_RATIO`); a restore, at its first isotropic fit."""
        if self._floor is None:
            self._floor = neighbour_lengthscale(self.normalized, NEIGHBOUR_CORRELATION,
                                                self.config.kernel.name)
        return self._floor

    def initial_state(self) -> KernelState:
        """The config's kernel ("fixed"), else the RMS-distance lengthscale ("auto"), or the
        neighbour floor on sparse candidates (FLOOR_START_RATIO; ARD too: it starts with one
        lengthscale, and its first fits, isotropic by BIC on 20 arms, meet the floor)."""
        cfg = self.config
        if cfg.hyperparameters == "fixed":
            lengthscale = cfg.kernel.params().get("lengthscale", [])
            return KernelState(tuple(np.atleast_1d(lengthscale).tolist()), cfg.lam,
                               source="fixed")
        start = self.start_lengthscale()
        floor = self.neighbour_floor() if self.fits else 0.0
        if floor > FLOOR_START_RATIO * start:
            return KernelState((floor,), cfg.lam, source="floor")
        return KernelState((start,), cfg.lam, source="start")

    def kernel_for(self, state: KernelState) -> tuple[Kernel, np.ndarray]:
        """The kernel and the engine's view of the candidates, ndarray of shape (A, d), for
        ``state`` (ARD: columns rescaled by l_mean / l_j, kernel lengthscale l_mean = geometric
        mean)."""
        cfg = self.config
        if cfg.hyperparameters != "auto":
            return cfg.kernel, self.normalized
        lengthscales = np.asarray(state.lengthscale)
        common = float(np.clip(np.exp(np.mean(np.log(lengthscales))), *PARAMETER_RANGE))
        kernel = make_kernel({**cfg.kernel.to_dict(), "lengthscale": common})
        if len(lengthscales) > 1:
            return kernel, np.ascontiguousarray(self.normalized * (common / lengthscales))
        return kernel, self.normalized

    def refit(self, current: KernelState, arms: np.ndarray, values: np.ndarray, *,
              n_observed: int, scale: float, dictionary: np.ndarray,
              rng: np.random.Generator) -> KernelState:
        """The state after a refit by marginal likelihood on ``n_observed`` observations, and
        what the fit makes of the kernel (:func:`after_fit`).

        ``arms``: the distinct observed arms, ``values`` their mean values as the batch's model
        sees them (divided by ``scale``), each of shape (n_arms,): UCB pulls its best arms many
        times, and with the replicates the noise would be pinned at the observation noise and
        the lengthscale shrunk until the arms' means are interpolated; one value per arm lets
        the noise term absorb what no smooth function explains. Titsias' bound with the batch's
        ``dictionary`` (at most FIT_INDUCING of its atoms, drawn from ``rng``; exact likelihood
        for GP-UCB / GP-BUCB, and for the others before a kept fit on few arms,
        EXACT_FIT_ARMS), from the last kept fit's values. After the first kept fit, a refit
        moves the lengthscales by at most a factor REFIT_TRUST from the last start
        (:attr:`KernelState.fitted_lengthscale`).
        """
        cfg = self.config
        exact = (cfg.strategy in EXACT_STRATEGIES or len(dictionary) == 0
                 or (current.variance is None and len(arms) <= EXACT_FIT_ARMS))
        last = None  # the last kept fit, the start of this one, in this batch's model units
        if current.variance is not None and current.noise is not None:
            last = Hyperparameters(current.fitted_lengthscale, current.variance / scale**2,
                                   current.noise / scale**2)
        inducing = None  # the inducing points' inputs
        if not exact:  # at most FIT_INDUCING atoms, a seeded subset: the bound costs O(n m^2)
            atoms = dictionary if len(dictionary) <= FIT_INDUCING else np.sort(
                rng.choice(dictionary, size=FIT_INDUCING, replace=False))
            inducing = self.normalized[atoms]
        prior = Prior(self.start_lengthscale())
        # the fit and the interval of smoothest_factor on the same rows (exact: O(n^3))
        points, values = subsample(self.normalized[arms], values, rng, 500 if exact else 2000)
        ard = bool(cfg.ard) and ard_due(current, len(arms))
        margin = ARD_MARGIN if cfg.ard == "auto" else 1.0
        result = fit(points, values, prior=prior, rng=rng, kernel=cfg.kernel.name,
                     ard=ard, ard_margin=margin,
                     inducing=inducing, start=last, trust=None if last is None else REFIT_TRUST,
                     restarts=2 if last is None else 0)
        floor = self.neighbour_floor() if len(result.hyperparameters.lengthscale) == 1 else 0.0
        state = after_fit(current, result, n_observed=n_observed, scale=scale, floor=floor,
                          lam=cfg.lam, smoothest=lambda fitted: smoothest_factor(
                              points, values, fitted, prior=prior, kernel=cfg.kernel.name,
                              inducing=inducing))
        retry = current.ard_retry_at if result.ard_gain is None else next_ard_try(  # (d = 1)
            result.ard_gain, len(arms), points.shape[1], margin, rows=len(points))
        return replace(state, ard_retry_at=retry)
