"""The :class:`Problem` type: a finite set of candidate arms with noiseless values.

A problem is *maximised*: ``best_value`` is the largest entry of ``values`` and
regret is measured against it. Observations add i.i.d. Gaussian noise with
standard deviation ``noise_sd``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Problem"]


def _as_readonly(array: np.ndarray) -> np.ndarray:
    """Return a float64 C-contiguous read-only copy of ``array``."""
    out = np.array(array, dtype=np.float64, copy=True, order="C")
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class Problem:
    """A finite-arm maximisation problem.

    Attributes:
        name: human-readable identifier, e.g. ``"branin_d2"`` or ``"abalone"``.
        candidates: ``(A, d)`` float64 array, one row per arm (stored read-only).
        values: ``(A,)`` float64 array, noiseless objective of each arm (to maximise).
        noise_sd: standard deviation of the Gaussian observation noise (``>= 0``).
    """

    name: str
    candidates: np.ndarray
    values: np.ndarray
    noise_sd: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Problem.name must be a non-empty string")
        try:
            candidates = _as_readonly(self.candidates)
            values = _as_readonly(self.values)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Problem {self.name!r}: arrays must be numeric: {exc}") from exc
        if candidates.ndim != 2 or candidates.shape[0] == 0 or candidates.shape[1] == 0:
            raise ValueError(
                f"Problem {self.name!r}: candidates must have shape (A, d) with A, d >= 1, "
                f"got {candidates.shape}"
            )
        if values.shape != (candidates.shape[0],):
            raise ValueError(
                f"Problem {self.name!r}: values must have shape ({candidates.shape[0]},) "
                f"to match candidates, got {values.shape}"
            )
        if not np.all(np.isfinite(candidates)):
            raise ValueError(f"Problem {self.name!r}: candidates contain NaN or inf")
        if not np.all(np.isfinite(values)):
            raise ValueError(f"Problem {self.name!r}: values contain NaN or inf")
        try:
            noise_sd = float(self.noise_sd)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Problem {self.name!r}: noise_sd must be a number") from exc
        if not math.isfinite(noise_sd) or noise_sd < 0:
            raise ValueError(
                f"Problem {self.name!r}: noise_sd must be finite and >= 0, got {self.noise_sd}"
            )
        object.__setattr__(self, "candidates", candidates)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "noise_sd", noise_sd)

    @property
    def n_arms(self) -> int:
        """Number of candidate arms ``A``."""
        return int(self.candidates.shape[0])

    @property
    def dim(self) -> int:
        """Dimension ``d`` of each candidate."""
        return int(self.candidates.shape[1])

    @property
    def best_value(self) -> float:
        """Largest noiseless value ``max_a values[a]``."""
        return float(self.values.max())

    @property
    def best_index(self) -> int:
        """Index of a best arm (the first one if several tie)."""
        return int(np.argmax(self.values))

    def _check_indices(self, index: np.ndarray | int) -> np.ndarray:
        """Validate arm indices; return them as an int64 array of the same shape."""
        idx = np.asarray(index)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(
                f"Problem {self.name!r}: arm indices must be integers, got {idx.dtype}"
            )
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_arms):
            raise ValueError(
                f"Problem {self.name!r}: arm indices must lie in [0, {self.n_arms}), "
                f"got range [{idx.min()}, {idx.max()}]"
            )
        return idx

    def observe(self, index: np.ndarray | int, rng: np.random.Generator) -> np.ndarray | float:
        """Noisy observation ``values[index] + N(0, noise_sd^2)``.

        Args:
            index: an integer, or an integer array of any shape ``S``.
            rng: source of the noise (always consumed, even when ``noise_sd == 0``).

        Returns:
            A float for a scalar index, otherwise a float64 array of shape ``S``.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator")
        idx = self._check_indices(index)
        noisy = self.values[idx] + rng.normal(0.0, self.noise_sd, size=idx.shape)
        if idx.ndim == 0:
            return float(noisy)
        return noisy

    def regret(self, selected: np.ndarray) -> np.ndarray:
        """Cumulative regret ``R_t = sum_{s<=t} (best_value - values[selected[s]])``.

        Args:
            selected: ``(T,)`` integer array of the arms chosen at steps ``1..T``.

        Returns:
            ``(T,)`` float64 array, non-decreasing, starting at the first step's regret.
        """
        idx = self._check_indices(selected)
        if idx.ndim != 1:
            raise ValueError(
                f"Problem {self.name!r}: selected must be a 1-D array of arm indices, "
                f"got shape {idx.shape}"
            )
        return np.cumsum(self.best_value - self.values[idx])

    def regret_ratio(self, selected: np.ndarray) -> np.ndarray:
        """``R_t / E[R_t]`` of the uniform policy, the latter in closed form
        ``t (best_value - mean(values))``: below 1 the run beats picking arms at random."""
        gap = self.best_value - float(np.mean(self.values))
        return self.regret(selected) / (gap * np.arange(1, len(selected) + 1))
