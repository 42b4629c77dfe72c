"""The history of a strategy: one record per selection (or imported observation), in order t.

Records are the engine's source of truth. Together with the current batch's index, start and
dictionary they determine every derived quantity (posterior, confidence width, stopping-rule
state), which is what makes a rebuilt strategy propose exactly what the live one would.

A record's ``folded`` field is the index of the batch at whose opening its outcome (a value or an
abandonment) entered the model; -1 while not yet folded. That single field lets the posterior at the
start of any batch b be reconstructed: it uses the records with t < start(b), counting as observed
those folded at or before b, and dropping those abandoned and folded at or before b.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import SelectionError

PENDING, OBSERVED, ABANDONED = 0, 1, 2
SUGGESTED, IMPORTED = 0, 1

_FIELDS: dict[str, np.dtype] = {
    "arm": np.dtype(np.int64),
    "batch": np.dtype(np.int64),
    "kind": np.dtype(np.int8),
    "status": np.dtype(np.int8),
    "value": np.dtype(np.float64),
    "folded": np.dtype(np.int64),
    "var_start": np.dtype(np.float64),
}


@dataclass(frozen=True)
class Selection:
    """One candidate handed out: sequence number t, candidate index (arm), batch index."""

    t: int
    arm: int
    batch: int
    variance: float  # sigma~^2 of the arm at the start of its batch (BBKB Theorem 2)


class Records:
    """Growable column store of the history (amortised O(1) append)."""

    def __init__(self, capacity: int = 256) -> None:
        self._n = 0
        self._cols = {name: np.empty(capacity, dtype) for name, dtype in _FIELDS.items()}

    def __len__(self) -> int:
        return self._n

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("_cols")
        if cols is None or name not in cols:
            raise AttributeError(name)
        return cols[name][: self._n]

    def append(self, *, arm: int, batch: int, kind: int, status: int, value: float,
               folded: int, var_start: float) -> int:
        """Append one record and return its t."""
        if self._n == len(self._cols["arm"]):
            for name, col in self._cols.items():
                grown = np.empty(2 * len(col), col.dtype)
                grown[: self._n] = col[: self._n]
                self._cols[name] = grown
        t = self._n
        for name, val in (("arm", arm), ("batch", batch), ("kind", kind), ("status", status),
                          ("value", value), ("folded", folded), ("var_start", var_start)):
            self._cols[name][t] = val
        self._n += 1
        return t

    def check(self, t: int) -> int:
        if isinstance(t, bool) or not isinstance(t, int | np.integer) or not 0 <= t < self._n:
            raise SelectionError(f"unknown selection t={t!r} (history has {self._n} records)",
                                 field="t")
        return int(t)

    def set(self, t: int, **values: float) -> None:
        for name, val in values.items():
            self._cols[name][t] = val

    def columns(self) -> dict[str, np.ndarray]:
        """Copies of every column, for persistence."""
        return {name: col[: self._n].copy() for name, col in self._cols.items()}

    @classmethod
    def from_columns(cls, columns: dict[str, np.ndarray]) -> Records:
        n = len(columns["arm"])
        records = cls(capacity=max(256, 2 * n))
        for name, dtype in _FIELDS.items():
            if name not in columns or len(columns[name]) != n:
                raise SelectionError(f"history column {name!r} missing or of wrong length",
                                     field=name)
            records._cols[name][:n] = np.asarray(columns[name], dtype=dtype)
        records._n = n
        return records

    def unfolded_resolved(self) -> np.ndarray:
        """Indices t of records whose outcome arrived but is not yet folded into the model."""
        return np.flatnonzero((self.status != PENDING) & (self.folded < 0))
