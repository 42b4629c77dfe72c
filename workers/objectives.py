"""Objectives a worker can evaluate, named by a string in the study's spec.

- ``"package.module:function"``: an importable function, called with the trial's named
  parameters as keyword arguments, returning a number.
- ``"function:<name>"`` (e.g. ``function:hartmann6``): a standard test function of
  service.problems, evaluated at the candidate vector, negated so that larger is better.
- ``"dataset:<name>"`` (``dataset:abalone``, ``dataset:cadata``): each candidate is a row of the
  data set; the value is its rescaled target plus N(0, noise^2) noise.

Options after ``?`` tune the built-ins: ``delay`` (seconds of simulated evaluation time),
``noise`` (sd), ``dim`` (for functions of any dimension), e.g. ``dataset:abalone?delay=0.05``.
The grammar is :func:`service.objectives.parse_objective`, the server's too. An import path is
imported only from a module the worker's ``BBKB_OBJECTIVE_MODULES`` allows (see
:func:`resolve`).
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from client.loop import as_value
from service.objectives import check_module, module_allowed, modules_from_env, parse_objective


class Refused(ValueError):
    """The objective cannot run here: a fault of the setup, never of the trial (the worker
    pauses the dispatch and gives the trial back). This worker's ``BBKB_OBJECTIVE_MODULES``
    refuses the module, or the module cannot be imported here, lacks the function (a typo in
    the objective), has it from another module, or the spec does not parse on this worker
    (one older than the server's)."""


class BadValue(ValueError):
    """The objective returned what cannot be a result (NaN, a string, beyond +-1e100)."""


@dataclass(frozen=True)
class Objective:
    """A resolved objective: ``evaluate(candidate index, vector, named parameters) -> value``."""

    spec: str
    evaluate: Callable[[int, list[float], Mapping[str, Any]], Any]
    delay: float = 0.0
    #: An import path's function: the module that defines it (None: a built-in objective).
    defined_in: str | None = None


@functools.lru_cache(maxsize=32)
def _built(spec: str) -> Objective:
    """The :class:`Objective` of a parsed, allowed spec (cached per process)."""
    kind, name, options = parse_objective(spec)
    delay = options.pop("delay", 0.0)
    if kind == "function":
        return Objective(spec, _function(name, options), delay)
    if kind == "dataset":
        return Objective(spec, _dataset(name, options), delay)
    module, _, attribute = name.partition(":")
    fn = _import(module, attribute)
    return Objective(spec, lambda candidate, vector, parameters: fn(**parameters), delay,
                     getattr(fn, "__module__", None) or "")


def resolve(spec: str) -> Objective:
    """Turn an objective string into an :class:`Objective`. The security boundary: an import
    path is imported only if this worker's own ``BBKB_OBJECTIVE_MODULES`` (read now, from its
    environment) allows its module, whatever the server allowed. :class:`Refused` with the
    reason if it cannot run here: whatever is wrong, it is wrong for every trial alike (before,
    a missing function failed every trial of a dispatch for good, in a second)."""
    try:
        parsed = parse_objective(spec)
    except ValueError as exc:  # the server checks specs: a stored one, or a newer server's
        raise Refused(f"{exc} (on this worker)") from exc
    if parsed.kind == "import":
        try:
            allowed = modules_from_env()
        except ValueError as exc:
            raise Refused(f"objective {spec!r} refused: this worker's {exc}") from exc
        try:
            check_module(parsed, spec, allowed, where="this worker")
        except ValueError as exc:
            raise Refused(str(exc)) from exc
    try:
        objective = _built(spec)
    except Refused:
        raise
    except Exception as exc:  # noqa: BLE001 - a data set that does not load here, say
        raise Refused(f"objective {spec!r} cannot be set up on this worker: "
                      f"{type(exc).__name__}: {exc}") from exc
    if parsed.kind == "import" and not module_allowed(objective.defined_in or "", allowed):
        # a name the allowed module imported from elsewhere (from subprocess import run)
        raise Refused(f"objective {spec!r} refused: its function is defined in module "
                      f"{objective.defined_in or '(none)'!r}, which this worker's "
                      f"BBKB_OBJECTIVE_MODULES does not allow (an objective is a function "
                      f"defined in an allowed module)")
    return objective


def _function(name: str, options: dict[str, float]) -> Callable[..., float]:
    from service.problems import get_function

    dim = options.pop("dim", None)
    built = functools.cache(lambda d: get_function(name, d))
    noise = options.pop("noise", 0.0)
    rng = np.random.default_rng()

    def evaluate(candidate: int, vector: list[float], parameters: Mapping[str, Any]) -> float:
        fn = built(len(vector) if dim is None else int(dim))  # without ?dim=: the study's
        value = float(fn.objective(np.asarray(vector, dtype=float)))
        return value + noise * float(rng.standard_normal()) if noise else value
    return evaluate


def _dataset(name: str, options: dict[str, float]) -> Callable[..., float]:
    from service.problems import dataset_problem

    problem = dataset_problem(name, noise_sd=options.pop("noise", 0.01))
    rng = np.random.default_rng()

    def evaluate(candidate: int, vector: list[float], parameters: Mapping[str, Any]) -> float:
        return float(problem.observe(int(candidate), rng))
    return evaluate


def _import(module: str, attribute: str) -> Callable[..., Any]:
    try:
        imported = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - not installed here, or broken here (a syntax
        # error, a missing dependency): the worker's setup, as far as the trial can tell
        raise Refused(f"objective {module}:{attribute} cannot be imported on this worker: "
                      f"{type(exc).__name__}: {exc}") from exc
    fn = getattr(imported, attribute, None)
    if fn is None or not callable(fn):  # a typo in the objective, most likely
        what = f"has no {attribute!r}" if fn is None else \
            f"has {attribute!r}, but it is a {type(fn).__name__}, not a function"
        raise Refused(f"objective {module}:{attribute}: module {module!r} (imported from "
                      f"{getattr(imported, '__file__', None) or '?'}) {what}; if the module "
                      f"changed, restart the workers: a worker imports it once")
    return fn  # type: ignore[no-any-return]


def run(objective: Objective, candidate: int, vector: list[float],
        parameters: Mapping[str, Any]) -> float:
    """Evaluate once; a value that is not a finite number within +-VALUE_LIMIT (the server
    would refuse it with a 422) raises :class:`BadValue` with the reason: the trial fails for
    good. What the objective raises (a ValueError too) passes through."""
    if objective.delay > 0:
        time.sleep(objective.delay)
    value, problem = as_value(objective.evaluate(candidate, vector, parameters), "objective")
    if problem is not None:
        raise BadValue(problem)
    assert value is not None
    return value
