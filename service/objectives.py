"""The grammar of a study's objective string, checked where a study or a dispatch names one.

Workers resolve the string (``workers.objectives.resolve``); the server cannot import a user's
module, but it can refuse what no worker could resolve, before any trial is spent on it:

- ``package.module:function``: dotted identifiers on both sides of one colon;
- ``function:<name>``: a test function of :mod:`service.problems` (``?dim=`` a positive integer);
- ``dataset:<name>``: one of :data:`service.problems.DATASETS`;
- options after ``?`` are numbers (``delay``, ``noise``, ``dim``).
"""

from __future__ import annotations

from typing import NoReturn
from urllib.parse import parse_qsl

from .errors import Invalid
from .problems import DATASETS, FUNCTIONS

#: Largest ``dim`` of a built-in test function (its box and candidates are dim-sized arrays).
MAX_FUNCTION_DIM = 10_000
FORMS = "'package.module:function', 'function:<name>' or 'dataset:<name>'"


def check_objective(spec: str) -> None:
    """Raise :class:`Invalid` (field ``objective``) if no worker could resolve ``spec``."""
    head, _, query = spec.partition("?")
    kind, colon, name = head.partition(":")
    if not colon or not kind or not name:
        _refuse(spec, f"expected {FORMS}")
    try:
        options = {key: float(value) for key, value in
                   parse_qsl(query, strict_parsing=bool(query), max_num_fields=20)}
    except ValueError as exc:
        _refuse(spec, f"options after '?' must be key=number pairs ({exc})")
    if kind == "function":
        key = name.strip().lower().replace("-", "_")
        if key not in FUNCTIONS:
            _refuse(spec, f"unknown test function {name!r}; choose one of {sorted(FUNCTIONS)}")
        dim = options.get("dim")
        if dim is not None and not (dim.is_integer() and 1 <= dim <= MAX_FUNCTION_DIM):
            _refuse(spec, f"dim must be an integer in [1, {MAX_FUNCTION_DIM}], got {dim:g}")
    elif kind == "dataset":
        if name not in DATASETS:
            _refuse(spec, f"unknown data set {name!r}; choose one of {list(DATASETS)}")
    elif not all(part.isidentifier() for part in (*kind.split("."), *name.split("."))):
        _refuse(spec, f"{head!r} is not an import path 'package.module:function'")


def _refuse(spec: str, why: str) -> NoReturn:
    raise Invalid(f"objective {spec!r}: {why}", field="objective")
