"""What the engine accepts as candidates and values, checked where they enter it: the candidate
matrix and a config's fit to its columns (the study's creation, :class:`Strategy`), and each
observed value (:meth:`Strategy.tell`, :meth:`Strategy.observe`, and the service before them)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .config import EngineConfig
from .errors import CandidateError, SelectionError
from .goucb import check_network
from .kernels import check_lengthscales

#: Largest |x| of a candidate coordinate or an observed value: beyond it the squares and sums
#: of the kernel, the standardisation and the posterior overflow float64 (1e308).
MAX_MAGNITUDE = 1e100


def check_dimension(config: EngineConfig, dim: int) -> None:
    """ConfigError if ``config`` cannot run on candidates of ``dim`` columns (a fixed
    lengthscale per column, GO-UCB's network size, :func:`goucb.check_network`): checked when
    the candidates arrive, not at an ask. Under hyperparameters "auto" the kernel's own
    lengthscale is unused (a ``Kernel`` object always holds one), so it is not checked."""
    if config.hyperparameters == "fixed":
        check_lengthscales(config.kernel, dim)
    if config.strategy == "go-ucb":
        check_network(dim, config.goucb_hidden)


def as_candidates(candidates: Any) -> np.ndarray:
    """Validate the (A, d) candidate matrix and return it as C-contiguous float64."""
    try:
        X = np.ascontiguousarray(candidates, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CandidateError(f"candidates must be a numeric matrix: {exc}",
                             field="candidates") from exc
    if X.ndim != 2:
        raise CandidateError(f"candidates must be a 2-D matrix (A, d), got shape {X.shape}",
                             field="candidates")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise CandidateError(f"candidate set is empty (shape {X.shape})", field="candidates")
    bad = ~np.isfinite(X)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise CandidateError(f"candidates contain NaN or inf (first at row {row}, column {col})",
                             field="candidates")
    huge = np.abs(X) > MAX_MAGNITUDE
    if huge.any():
        row, col = np.argwhere(huge)[0]
        raise CandidateError(f"candidates must lie within +-{MAX_MAGNITUDE:g} (first outside "
                             f"at row {row}, column {col}: {float(X[row, col])!r})",
                             field="candidates")
    return X


def value_problem(value: float) -> str | None:
    """Why ``tell`` / ``observe`` refuse the number ``value`` (None: they take it)."""
    if not math.isfinite(value):
        return f"value must be finite, got {value!r}"
    if abs(value) > MAX_MAGNITUDE:
        return f"value must lie within +-{MAX_MAGNITUDE:g}, got {value!r}"
    return None


def as_value(value: Any) -> float:
    """``value`` as the float ``tell`` / ``observe`` record, else SelectionError (field
    "value"): not a number, or :func:`value_problem`."""
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise SelectionError(f"value must be a number, got {value!r}", field="value") from exc
    if (problem := value_problem(out)) is not None:
        raise SelectionError(problem, field="value")
    return out
