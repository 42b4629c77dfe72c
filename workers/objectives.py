"""Objectives a worker can evaluate, named by a string in the study's spec.

- ``"package.module:function"``: an importable function, called with the trial's named
  parameters as keyword arguments, returning a number.
- ``"function:<name>"`` (e.g. ``function:hartmann6``): a standard test function of
  service.problems, evaluated at the candidate vector, negated so that larger is better.
- ``"dataset:<name>"`` (``dataset:abalone``, ``dataset:cadata``): each candidate is a row of the
  data set; the value is its rescaled target plus N(0, noise^2) noise.

Options after ``?`` tune the built-ins: ``delay`` (seconds of simulated evaluation time),
``noise`` (sd), ``dim`` (for functions of any dimension), e.g. ``dataset:abalone?delay=0.05``.
"""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import numpy as np

from client.loop import as_value


@dataclass(frozen=True)
class Objective:
    """A resolved objective: ``evaluate(candidate index, vector, named parameters) -> value``."""

    spec: str
    evaluate: Callable[[int, list[float], Mapping[str, Any]], Any]
    delay: float = 0.0


def _options(query: str) -> dict[str, float]:
    out = {}
    for key, value in parse_qsl(query, strict_parsing=bool(query)):
        try:
            out[key] = float(value)
        except ValueError as exc:
            raise ValueError(f"objective option {key}={value!r} is not a number") from exc
    return out


@functools.lru_cache(maxsize=32)
def resolve(spec: str) -> Objective:
    """Turn an objective string into an :class:`Objective` (cached per process)."""
    head, _, query = spec.partition("?")
    options = _options(query)
    delay = options.pop("delay", 0.0)
    kind, sep, name = head.partition(":")
    if kind == "function" and sep:
        return Objective(spec, _function(name, options), delay)
    if kind == "dataset" and sep:
        return Objective(spec, _dataset(name, options), delay)
    if sep and name:
        return Objective(spec, _import(kind, name), delay)
    raise ValueError(f"objective {spec!r}: expected 'package.module:function', "
                     "'function:<name>' or 'dataset:<name>'")


def _function(name: str, options: dict[str, float]) -> Callable[..., float]:
    from service.problems import get_function

    dim = options.pop("dim", None)
    fn = get_function(name, None if dim is None else int(dim))
    noise = options.pop("noise", 0.0)
    rng = np.random.default_rng()

    def evaluate(candidate: int, vector: list[float], parameters: Mapping[str, Any]) -> float:
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
        fn = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"objective {module}:{attribute} cannot be imported: {exc}") from exc

    def evaluate(candidate: int, vector: list[float], parameters: Mapping[str, Any]) -> Any:
        return fn(**parameters)
    return evaluate


def run(objective: Objective, candidate: int, vector: list[float],
        parameters: Mapping[str, Any]) -> float:
    """Evaluate once; a value that is not a finite number within +-VALUE_LIMIT (the server
    would refuse it with a 422) raises ValueError with the reason: the trial fails for good."""
    if objective.delay > 0:
        time.sleep(objective.delay)
    value, problem = as_value(objective.evaluate(candidate, vector, parameters), "objective")
    if problem is not None:
        raise ValueError(problem)
    assert value is not None
    return value
