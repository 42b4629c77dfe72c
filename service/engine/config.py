"""Engine configuration: one frozen, validated record per study.

Parameter names follow the BBKB paper: ``lam`` is the regulariser lambda, ``noise`` is xi,
``rkhs_bound`` is F, ``batch_threshold`` is C~ (BBKB) or C (GP-BUCB), ``oversampling`` is q-bar.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, fields
from typing import Any

from .errors import ConfigError
from .kernels import DEFAULT_BLOCK_ROWS, PARAMETER_RANGE, Kernel, make_kernel
from .normalize import NORMALIZERS

#: The lam a new study may have, the kernel parameters' range (sigma^2 / lam overflowed to inf
#: at 5e-324). Not checked here: a study stored with another lam still loads and runs.
LAM_RANGE = PARAMETER_RANGE

STRATEGIES: tuple[str, ...] = ("bbkb", "bkb", "gp-ucb", "gp-bucb", "uniform", "epsilon-greedy",
                               "thompson", "gssbo", "go-ucb")
#: How GSSBO / GO-UCB close their batches; GSSBO buffer selection rules (gssbo.py).
BATCH_RULES: tuple[str, ...] = ("sequential", "fixed", "product")
GSSBO_SELECTIONS: tuple[str, ...] = ("gradient", "column", "scalar", "random")
#: Stopping rules of BBKB: "global" (Lemma 1), "local" (Lemma 3, the paper's GlobalLocal-BBKB),
#: "combined" (Lemma 1 until it fires, then Lemma 3, Section 4).
STOPPING_RULES: tuple[str, ...] = ("global", "local", "combined")
MODES: tuple[str, ...] = ("sync", "async")
#: "auto": lengthscale from the candidates, then refit by marginal likelihood at batch openings
#: (autokernel.py, hyperparameters.py); "fixed": the kernel as given.
HYPERPARAMETERS: tuple[str, ...] = ("auto", "fixed")
#: How the kernel strategies see the values (Strategy._value_scaling): "unit" maps the values
#: observed so far into [0, 1] at each batch opening if they are not in it; "none" takes them
#: as given.
VALUE_SCALINGS: tuple[str, ...] = ("unit", "none")
_TUNABLE_KERNELS = ("rbf", "matern52")
#: Strategies with models of their own (gssbo.py, goucb.py): their papers' widths (explore
#: defaults to 1) and no kernel hyper-parameters of the engine.
LITERATURE_STRATEGIES: tuple[str, ...] = ("gssbo", "go-ucb")
#: Strategies on the exact GP posterior (exact.py): no dictionary, exact-likelihood fits.
EXACT_STRATEGIES: tuple[str, ...] = ("gp-ucb", "gp-bucb")
#: Strategies whose batches use none of the engine's kernel: no model, or their own.
NO_KERNEL_STRATEGIES: tuple[str, ...] = ("uniform", *LITERATURE_STRATEGIES)
#: Upper bounds that keep one ask's work finite: restarts of a fit (each a full L-BFGS run;
#: 200 took 5.7 s per ask of GO-UCB) and GO-UCB's hidden units (Sigma is p x p, p = hidden
#: (d + 2) + 1; goucb.MAX_NETWORK_SIZE bounds p itself).
MAX_FIT_RESTARTS = 20
MAX_HIDDEN = 1024
_OWN_MODELS = {"gssbo": "its own Matern-5/2 GP, fitted by maximum likelihood",
               "go-ucb": "a neural network"}


@dataclass(frozen=True)
class EngineConfig:
    """Everything that determines a strategy's proposals, given candidates and history."""

    strategy: str = "bbkb"
    kernel: Kernel = None  # type: ignore[assignment]  # None: RBF, lengthscale chosen (auto)
    lam: float = 1.0
    noise: float = 0.01
    rkhs_bound: float = 1.0
    delta: float = 1e-4
    batch_threshold: float = 2.0
    #: q-bar. The paper's experiments use 2; 8 does better at little cost: Hartmann-6 /
    #: Levy-20 at T = 1000 (fitted kernel, 3 seeds) regret ratio 0.18 / 0.22 at 2, 0.11 / 0.20
    #: at 8 and 32 (GP-BUCB 0.08 / 0.12), Cadata at T = 10^4 0.0026 at 8 (benchmarks/paper.py).
    #: The dictionary grows about linearly with q-bar until it holds every pulled arm.
    oversampling: float = 8.0
    stopping_rule: str = "global"
    #: A multiplier on the UCB width (Thompson: on the sampling scale). None: 0.1 for the
    #: kernel strategies, as in the paper's experiments (the Theorem 2 width itself, 1,
    #: over-explores, and below 0.1 UCB settles too early), 1 for GSSBO and GO-UCB, whose widths
    #: are their papers' (Srinivas' beta_t, goucb_beta). BBKB, auto kernel, T = 2000, 30 seeds
    #: (benchmarks/hyperparameters.py problems), regret ratio at explore 1 / 0.3 / 0.2 / 0.1 /
    #: 0.05: Abalone 0.30 / 0.13 / 0.13 / 0.11 / 0.23, Cadata 0.21 / 0.030 / 0.020 / 0.0053 /
    #: 0.0058, Hartmann-6 0.94 / 0.37 / 0.16 / 0.047 / 0.36, Levy 0.34 / 0.097 / 0.069 /
    #: 0.035 / 0.056, Branin 0.31 / 0.11 / 0.081 / 0.025 / 0.089.
    explore: float | None = None
    mode: str = "async"
    min_parallelism: int | None = None
    max_init_points: int = 1000
    batch_size: int = 30
    epsilon: float = 0.1
    seed: int = 0
    block_rows: int = DEFAULT_BLOCK_ROWS
    #: GSSBO (gssbo.py) and GO-UCB (goucb.py). Their batches (neither paper has any):
    #: "sequential", "fixed" (batch_size) or "product" (GP-BUCB's rule with batch_threshold).
    batch_rule: str = "sequential"
    gssbo_initial: int = 20  # n0, the initial design, always kept in the buffer
    gssbo_buffer: int | None = 100  # M; None: every observation (GP-UCB), or the time rule
    gssbo_selection: str = "gradient"  # GSSBO_SELECTIONS ("random" is the paper's RSSBO)
    gssbo_gradient_noise: float = 0.1  # sd of the perturbation of the normalised gradients
    gssbo_time_factor: float | None = None  # Z of the paper's time rule (breaks exact replay)
    horizon: int = 1000  # T: GO-UCB's Phase I has ceil(sqrt(T)) points, lam sqrt(T) log^2 T
    goucb_hidden: int = 25
    goucb_beta: float = 1.0  # beta of the UCB width sqrt(beta) ||g||_{Sigma^-1} (see goucb.py)
    goucb_lam: float | None = None  # None: the paper's sqrt(T) log^2 T
    fit_restarts: int = 2  # seeded restarts of the GSSBO likelihood and GO-UCB Phase I fits
    #: None: "fixed" if the kernel's lengthscale is given, else "auto" (HYPERPARAMETERS).
    hyperparameters: str | None = None
    #: Candidate scaling (normalize.py); None: "zscore" under "auto", "none" under "fixed".
    normalize: str | None = None
    #: Under "auto": one lengthscale per dimension (ARD) where BIC prefers them to one for all
    #: (True); only where the evidence for them is ARD_MARGIN times BIC's price, i.e. inputs
    #: the values ignore ("auto"); never (False).
    ard: bool | str = "auto"
    #: VALUE_SCALINGS (Strategy._value_scaling). The defaults of noise (xi), rkhs_bound (F)
    #: and the prior mean 0 are the papers': values on [0, 1]. Raw -Branin (values -300 to
    #: -0.4), 10 seeds, mean best after 400 evaluations: -0.52 under "unit", -1.85 as given
    #: (uniform sampling -0.51; benchmarks/value_scale.py).
    normalize_values: str = "unit"
    #: The objective gives the same value for the same candidate: no candidate is proposed
    #: twice (a repeat tells nothing), and ``ask`` hands out fewer selections, then none (a
    #: SelectionError), once every candidate has been. By default UCB repeats its best arm,
    #: as a bandit under noise should: on noiseless Branin, Hartmann-6 and Levy (2000
    #: candidates), after 200 evaluations, its best is further from the optimum than uniform
    #: sampling's, where this finds the optimum (benchmarks/deterministic.py).
    deterministic: bool = False

    def __post_init__(self) -> None:
        self._resolve_hyperparameters()
        if not isinstance(self.deterministic, bool):
            raise ConfigError(f"deterministic must be true or false, got {self.deterministic!r}",
                              field="deterministic")
        _choice("normalize_values", self.normalize_values, VALUE_SCALINGS)
        self._refuse_unused_kernel_settings()
        _choice("strategy", self.strategy, STRATEGIES)
        _choice("stopping_rule", self.stopping_rule, STOPPING_RULES)
        _choice("mode", self.mode, MODES)
        _number("lam", self.lam, low=0.0)  # new studies: LAM_RANGE (service.studies)
        _number("noise", self.noise, low=0.0, inclusive=True)
        _number("rkhs_bound", self.rkhs_bound, low=0.0, inclusive=True)
        _number("delta", self.delta, low=0.0, high=1.0)
        _number("batch_threshold", self.batch_threshold, low=1.0,
                hint="C~ must exceed 1 (C~ = 1 would allow no batch at all; use strategy 'bkb')")
        _number("oversampling", self.oversampling, low=0.0)
        if self.explore is None:
            object.__setattr__(self, "explore", 1.0 if self.strategy in LITERATURE_STRATEGIES
                               else 0.1)
        _number("explore", self.explore, low=0.0, inclusive=True)
        _number("epsilon", self.epsilon, low=0.0, high=1.0, inclusive=True)
        _integer("batch_size", self.batch_size, low=1)
        _integer("max_init_points", self.max_init_points, low=1)
        _integer("block_rows", self.block_rows, low=1)
        _integer("seed", self.seed, low=0)
        self._validate_literature()
        if self.min_parallelism is not None:
            _integer("min_parallelism", self.min_parallelism, low=1)

    def _resolve_hyperparameters(self) -> None:
        """Kernel, hyperparameters and normalize defaults (explicit values in to_dict)."""
        spec = self.kernel
        if isinstance(spec, dict) and spec.get("lengthscale") == "auto":
            spec = {k: v for k, v in spec.items() if k != "lengthscale"}
            if self.hyperparameters is None:
                object.__setattr__(self, "hyperparameters", "auto")
        given = isinstance(spec, Kernel) or (isinstance(spec, dict) and "lengthscale" in spec)
        kernel = make_kernel(spec)
        object.__setattr__(self, "kernel", kernel)
        tunable = kernel.name in _TUNABLE_KERNELS
        mode = self.hyperparameters or ("auto" if tunable and not given else "fixed")
        _choice("hyperparameters", mode, HYPERPARAMETERS)
        if mode == "auto" and not tunable:
            raise ConfigError(f"hyperparameters 'auto' needs a kernel with a lengthscale "
                              f"({list(_TUNABLE_KERNELS)}), got {kernel.name!r}",
                              field="hyperparameters")
        if mode == "fixed" and tunable and not given \
                and self.strategy not in LITERATURE_STRATEGIES:  # those refuse it below
            raise ConfigError("hyperparameters 'fixed' runs on the kernel's own lengthscale: "
                              "give one, or drop hyperparameters to let the engine choose it",
                              field="kernel.lengthscale")
        if mode == "auto" and isinstance(spec, dict) and "lengthscale" in spec:
            raise ConfigError("the lengthscale is chosen by the engine under hyperparameters "
                              "'auto': drop it, or set hyperparameters 'fixed'",
                              field="kernel.lengthscale")
        if not (isinstance(self.ard, bool) or self.ard == "auto") or (
                self.ard is True and mode != "auto"):
            raise ConfigError("ard must be true, false or 'auto', and true only with "
                              "hyperparameters 'auto'", field="ard")
        object.__setattr__(self, "hyperparameters", mode)
        normalize = self.normalize or ("zscore" if mode == "auto" else "none")
        _choice("normalize", normalize, NORMALIZERS)
        object.__setattr__(self, "normalize", normalize)

    def _refuse_unused_kernel_settings(self) -> None:
        """GSSBO and GO-UCB never see the engine's kernel: settings other than the defaults
        would go silently unused, so they are refused (the defaults round-trip through
        :meth:`to_dict`)."""
        if self.strategy not in LITERATURE_STRATEGIES:
            return
        unused = [name for name, default in (
            ("kernel", self.kernel.to_dict() == make_kernel(None).to_dict()),
            ("hyperparameters", self.hyperparameters == "auto"),
            ("normalize", self.normalize == "zscore"), ("ard", self.ard is not True),
            ("normalize_values", self.normalize_values == "unit")) if not default]
        if unused:
            raise ConfigError(f"strategy {self.strategy!r} uses {_OWN_MODELS[self.strategy]}: "
                              f"{unused[0]!r} does not apply to it; drop it", field=unused[0])

    def _validate_literature(self) -> None:
        """The GSSBO / GO-UCB parameters (checked whatever the strategy: clear errors early)."""
        _choice("batch_rule", self.batch_rule, BATCH_RULES)
        _integer("gssbo_initial", self.gssbo_initial, low=1)
        if self.gssbo_buffer is not None:
            _integer("gssbo_buffer", self.gssbo_buffer, low=self.gssbo_initial + 1)
        _choice("gssbo_selection", self.gssbo_selection, GSSBO_SELECTIONS)
        _number("gssbo_gradient_noise", self.gssbo_gradient_noise, low=0.0, inclusive=True)
        if self.gssbo_time_factor is not None:
            _number("gssbo_time_factor", self.gssbo_time_factor, low=1.0)
            if self.gssbo_buffer is not None:
                raise ConfigError("gssbo_time_factor sets the buffer size itself: set "
                                  "gssbo_buffer to null to use it", field="gssbo_time_factor")
        _integer("horizon", self.horizon, low=4, high=MAX_HORIZON)
        _integer("goucb_hidden", self.goucb_hidden, low=1, high=MAX_HIDDEN)
        _number("goucb_beta", self.goucb_beta, low=0.0, inclusive=True)
        if self.goucb_lam is not None:
            _number("goucb_lam", self.goucb_lam, low=0.0)
        _integer("fit_restarts", self.fit_restarts, low=0, high=MAX_FIT_RESTARTS)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dictionary (the kernel as its parameter dictionary; under
        hyperparameters 'auto' without its lengthscale, which the engine chooses)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["kernel"] = self.kernel.to_dict()
        if self.hyperparameters == "auto":
            out["kernel"].pop("lengthscale", None)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {unknown}; the keys are "
                              f"{sorted(known)}", field=unknown[0])
        return cls(**data)

    def replace(self, **changes: Any) -> EngineConfig:
        data = asdict(self) | {"kernel": self.kernel} | changes
        return EngineConfig(**data)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}", field=name)


def _number(name: str, value: float, *, low: float, high: float = math.inf,
            inclusive: bool = False, hint: str | None = None) -> None:
    huge = isinstance(value, int) and abs(value) > sys.float_info.max  # JSON holds any int
    ok = isinstance(value, int | float) and not huge and math.isfinite(value)
    ok = ok and (value >= low if inclusive else value > low) and value <= high
    if not ok:
        bound = f">= {low}" if inclusive else f"> {low}"
        message = hint or f"{name} must be a finite number {bound}" + (
            f" and <= {high}" if high < math.inf else "")
        got = "an integer beyond float64's range" if huge else repr(value)
        raise ConfigError(f"{message}; got {got}", field=name)


#: GO-UCB's T: Phase I has ceil(sqrt(T)) points, so 10^12 is beyond any study; a T past
#: float64's range (10^400) was accepted and every ask failed (OverflowError).
MAX_HORIZON = 10**12


def _integer(name: str, value: int, *, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (
            high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        shown = repr(value)
        shown = shown if len(shown) <= 40 else f"{shown[:20]}... ({len(shown)} characters)"
        raise ConfigError(f"{name} must be an integer {bound}, got {shown}", field=name)
