"""Per-dimension scaling of the candidate set, chosen from the candidates alone.

The engine works on x' = (x - shift) / scale, so that one default lengthscale range makes sense
for any data set. The scaling is a pure function of the candidate matrix and the method, hence
stored with the study through its candidates and config, and identical after a restart.

- ``"zscore"``: shift = column mean, scale = column standard deviation (population).
- ``"unit"``: the candidates' bounding box mapped to [0, 1]^d.
- ``"none"``: the candidates as given (a fixed lengthscale is then in the user's units).

Constant columns get scale 1 (they carry no distance either way), also those constant but for
rounding (0.3 and 0.1 + 0.2: a spread below :data:`ROUNDING` times the shift), which scaling by
their spread would turn into a column of +-1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NORMALIZERS: tuple[str, ...] = ("zscore", "unit", "none")

#: The relative spread of numbers equal but for rounding (64 float64 epsilons).
ROUNDING = 64 * np.finfo(np.float64).eps


@dataclass(frozen=True, eq=False)
class Scaling:
    """x' = (x - shift) / scale, shift and scale of shape (d,)."""

    method: str
    shift: np.ndarray
    scale: np.ndarray

    def apply(self, X: np.ndarray) -> np.ndarray:
        """Scaled copy of X (shape (n, d)); X itself when the method is ``"none"``."""
        if self.method == "none":
            return X
        return np.ascontiguousarray((X - self.shift) / self.scale)


def choose_scaling(X: np.ndarray, method: str) -> Scaling:
    """The scaling of ``method`` for the (A, d) candidate matrix X."""
    d = X.shape[1]
    if method == "zscore":
        shift, scale = X.mean(axis=0), X.std(axis=0)
    elif method == "unit":
        shift, scale = X.min(axis=0), np.ptp(X, axis=0)
    elif method == "none":
        shift, scale = np.zeros(d), np.ones(d)
    else:
        raise ValueError(f"normalize must be one of {list(NORMALIZERS)}, got {method!r}")
    scale = np.where(scale > ROUNDING * np.abs(shift), scale, 1.0)  # and not 0
    return Scaling(method, shift, scale)
