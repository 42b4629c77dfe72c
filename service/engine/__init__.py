"""The optimisation engine: BBKB and its family over a finite candidate set.

Pure numpy/scipy: no web, SQL or Redis code is imported here. Typical use::

    from service.engine import Strategy
    strategy = Strategy(X, strategy="bbkb", kernel={"name": "rbf", "lengthscale": 2.0}, seed=0)
    for selection in strategy.ask_batch():
        strategy.tell(selection.t, f(X[selection.arm]))
"""

from .config import MODES, STOPPING_RULES, STRATEGIES, EngineConfig
from .errors import (
    CandidateError,
    CapacityError,
    ConfigError,
    EngineError,
    ExhaustedError,
    NumericalError,
    SelectionError,
)
from .kernels import RBF, Kernel, Linear, Matern52, make_kernel
from .records import ABANDONED, IMPORTED, OBSERVED, PENDING, SUGGESTED, Selection
from .strategy import BatchInfo, EngineState, Strategy
from .validation import as_candidates, check_dimension, value_problem

__all__ = [
    "ABANDONED", "IMPORTED", "MODES", "OBSERVED", "PENDING", "RBF", "STOPPING_RULES",
    "STRATEGIES", "SUGGESTED", "BatchInfo", "CandidateError", "CapacityError", "ConfigError",
    "EngineConfig",
    "EngineError", "EngineState", "Kernel", "Linear", "Matern52", "NumericalError",
    "SelectionError", "ExhaustedError", "Selection", "Strategy", "as_candidates",
    "check_dimension", "make_kernel", "value_problem",
]
