"""Engine configuration: one frozen, validated record per study.

Parameter names follow ENGINE.md: ``lam`` is the regulariser lambda, ``noise`` is xi, ``rkhs_bound``
is F, ``batch_threshold`` is C~ (BBKB) or C (GP-BUCB), ``oversampling`` is q-bar.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from .errors import ConfigError
from .kernels import DEFAULT_BLOCK_ROWS, Kernel, make_kernel

StrategyName = Literal["bbkb", "bkb", "gp-ucb", "gp-bucb", "uniform", "epsilon-greedy", "thompson"]
STRATEGIES: tuple[str, ...] = ("bbkb", "bkb", "gp-ucb", "gp-bucb", "uniform", "epsilon-greedy",
                               "thompson")
#: Stopping rules of BBKB: "global" (Lemma 1), "local" (Lemma 3, the paper's GlobalLocal-BBKB),
#: "combined" (Lemma 1 until it fires, then Lemma 3, Section 4).
STOPPING_RULES: tuple[str, ...] = ("global", "local", "combined")
MODES: tuple[str, ...] = ("sync", "async")


@dataclass(frozen=True)
class EngineConfig:
    """Everything that determines a strategy's proposals, given candidates and history."""

    strategy: str = "bbkb"
    kernel: Kernel = field(default_factory=make_kernel)
    lam: float = 1.0
    noise: float = 0.01
    rkhs_bound: float = 1.0
    delta: float = 1e-4
    batch_threshold: float = 2.0
    oversampling: float = 2.0
    stopping_rule: str = "global"
    explore: float = 1.0
    mode: str = "async"
    min_parallelism: int | None = None
    max_init_points: int = 1000
    batch_size: int = 30
    epsilon: float = 0.1
    seed: int = 0
    block_rows: int = DEFAULT_BLOCK_ROWS

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernel", make_kernel(self.kernel))
        _choice("strategy", self.strategy, STRATEGIES)
        _choice("stopping_rule", self.stopping_rule, STOPPING_RULES)
        _choice("mode", self.mode, MODES)
        _number("lam", self.lam, low=0.0)
        _number("noise", self.noise, low=0.0, inclusive=True)
        _number("rkhs_bound", self.rkhs_bound, low=0.0, inclusive=True)
        _number("delta", self.delta, low=0.0, high=1.0)
        _number("batch_threshold", self.batch_threshold, low=1.0,
                hint="C~ must exceed 1 (C~ = 1 would allow no batch at all; use strategy 'bkb')")
        _number("oversampling", self.oversampling, low=0.0)
        _number("explore", self.explore, low=0.0, inclusive=True)
        _number("epsilon", self.epsilon, low=0.0, high=1.0, inclusive=True)
        _integer("batch_size", self.batch_size, low=1)
        _integer("max_init_points", self.max_init_points, low=1)
        _integer("block_rows", self.block_rows, low=1)
        _integer("seed", self.seed, low=0)
        if self.min_parallelism is not None:
            _integer("min_parallelism", self.min_parallelism, low=1)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dictionary (the kernel as its parameter dictionary)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["kernel"] = self.kernel.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown configuration keys {unknown}", field=unknown[0])
        return cls(**data)

    def replace(self, **changes: Any) -> EngineConfig:
        data = asdict(self) | {"kernel": self.kernel} | changes
        return EngineConfig(**data)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}", field=name)


def _number(name: str, value: float, *, low: float, high: float = math.inf,
            inclusive: bool = False, hint: str | None = None) -> None:
    ok = isinstance(value, int | float) and math.isfinite(value)
    ok = ok and (value >= low if inclusive else value > low) and value <= high
    if not ok:
        bound = f">= {low}" if inclusive else f"> {low}"
        message = hint or f"{name} must be a finite number {bound}" + (
            f" and <= {high}" if high < math.inf else "")
        raise ConfigError(f"{message}; got {value!r}", field=name)


def _integer(name: str, value: int, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}", field=name)
