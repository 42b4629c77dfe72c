"""Noiseless values of the built-in objectives, so that the dashboard can show regret.

The built-in objectives of ``workers.objectives`` have a known noiseless value at every
candidate: ``dataset:<name>`` (arm i is row i of the data set, its value the rescaled target) and
``function:<name>`` (the negated test function at the candidate vector). Regret is BBKB's
finite-arm regret (Calandriello et al. 2020, Sec. 2), against the best candidate of the study:
after i evaluations, the simple regret is ``f(x*) - max_{s <= i} f(x_s)`` (maximising).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..objectives import parse_objective
from ..problems import dataset_problem, get_function


def noiseless_values(objective: str | None, n_candidates: int, dim: int,
                     candidates: Callable[[], np.ndarray]) -> np.ndarray | None:
    """f at every candidate (length ``n_candidates``), or None when the objective is not a
    built-in one or does not fit the study (other size or dimension)."""
    if not objective:
        return None
    try:
        kind, name, options = parse_objective(objective)  # a stored one may predate the checks
        if kind == "dataset":
            values = dataset_problem(name).values  # type: ignore[arg-type]
            return values if len(values) == n_candidates else None
        if kind == "function":
            if "dim" in options and options["dim"] != dim:
                return None  # checked before building the function
            fn = get_function(name, dim)  # without ?dim=: the candidates' (as the workers do)
            return np.asarray(fn.objective(candidates()), dtype=np.float64)
    except (ValueError, KeyError):
        return None
    return None
