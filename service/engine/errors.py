"""Exceptions raised by the engine.

Every error names the offending input so that the service can turn it into a 4xx answer with a
field.
All derive from :class:`EngineError`, itself a :class:`ValueError`.
"""

from __future__ import annotations


class EngineError(ValueError):
    """Base class of every error the engine raises for bad input or a bad call."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ConfigError(EngineError):
    """A configuration value is out of range or inconsistent."""


class CandidateError(EngineError):
    """The candidate matrix is malformed (shape, NaN/inf, empty)."""


class SelectionError(EngineError):
    """A call refers to an unknown selection or one whose state forbids it."""


class ExhaustedError(SelectionError):
    """``deterministic``: every candidate has been proposed or imported; raised before the
    strategy changes anything."""


class NumericalError(EngineError):
    """A factorisation failed; the message says which parameter to change."""


class CapacityError(EngineError):
    """A strategy would need more memory than it may hold (the exact GP's t x A matrix)."""
