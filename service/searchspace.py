"""Search spaces: named parameters <-> rows of the candidate (feature) matrix.

Features are what the kernel sees: floats as they are, log-scale floats as log(x), integers as
numbers (log-scale ones sampled log-uniformly), categoricals one-hot. A search space plus a count
becomes a candidate set by a scrambled Sobol sequence (scipy.stats.qmc), seeded by the study's
seed; an entirely discrete space gives distinct points (each once if it has no more than the
count).
The candidates are stored with the study (never drawn again), so how new ones are made can
change without touching stored studies.

The models are part of the API schemas, which the SDK imports: numpy and scipy are imported only
where candidates are made or decoded, so ``import client`` stays light.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .api.numbers import JsonBool, JsonFloat, NotBlank, PlainText

if TYPE_CHECKING:
    import numpy as np

Value = float | int | str
#: Largest |low| and |high|: the engine's bound on candidates (engine.strategy.MAX_MAGNITUDE;
#: not imported, so that ``import client`` stays light).
BOUND = 1e100
#: Integers up to this magnitude are exact in float64 features (2**53).
EXACT_INTEGERS = 2.0**53
#: Distinct points of a discrete space are looked for in at most this many times n draws, and
#: in no more than this many numbers beyond the n rows themselves (256 MB).
MAX_DRAWS = 64
MAX_DRAWN_NUMBERS = 2**25


class StoredParameter(BaseModel):
    """A parameter as a study stores it (the dump of a :class:`Parameter`): loaded with the
    checks it was created under, so that a study created before a stricter check still loads."""

    name: Annotated[str, Field(min_length=1, max_length=100)]
    type: Literal["float", "int", "categorical"] = "float"
    low: JsonFloat | None = None
    high: JsonFloat | None = None
    log: bool = False
    choices: list[str | int | float] | None = Field(default=None, max_length=1000)

    @model_validator(mode="after")
    def _check(self) -> StoredParameter:
        if self.type == "categorical":
            # 1 and 1.0 are one choice, 1 and "1" two (as they compare)
            distinct = {(isinstance(c, str), c) for c in self.choices or []}
            if not self.choices or len(distinct) != len(self.choices):
                raise ValueError(f"parameter {self.name!r}: categorical needs distinct choices")
            if not all(isinstance(c, str) or math.isfinite(c) for c in self.choices):
                raise ValueError(f"parameter {self.name!r}: choices must be strings or finite "
                                 "numbers")
            return self
        if self.low is None or self.high is None or not (
                -BOUND <= self.low < self.high <= BOUND):  # NaN fails too
            raise ValueError(f"parameter {self.name!r}: needs low < high within +-{BOUND:g}")
        if self.log and self.low <= 0:
            raise ValueError(f"parameter {self.name!r}: a log-scale parameter needs low > 0")
        if self.type == "int" and math.ceil(self.low) > math.floor(self.high):
            raise ValueError(f"parameter {self.name!r}: no integer between low and high")
        return self

    @property
    def width(self) -> int:
        """Number of feature columns."""
        return len(self.choices or []) if self.type == "categorical" else 1


def _choice(value: Any) -> Any:
    """A categorical choice: a string or a finite number, an integer kept as one (a batch size
    of 32 comes back as 32, not 32.0); not a boolean (JSON's ``true`` is not the number 1, as
    in ``numbers.JsonFloat``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        kind = "null" if value is None else type(value).__name__
        raise ValueError(f"expected a string or a number, not a {kind}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond float64
        finite = False
    if not finite:
        raise ValueError(f"a numeric choice must be a finite float64, got {value!r:.50}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


#: Parameter names are checked as study names are (schemas.Name): no control or invisible
#: characters (TEXT_PATTERN), not blank.
ParameterName = Annotated[str, Field(min_length=1, max_length=100), *PlainText,
                          NotBlank]
#: low and high: the bound is checked by StoredParameter._check (its message names both);
#: published in the OpenAPI schema too.
Bound = Annotated[JsonFloat, Field(json_schema_extra={"minimum": -BOUND, "maximum": BOUND})]
Choice = Annotated[str | int | float, BeforeValidator(_choice)]


class Parameter(StoredParameter):
    """One named parameter of a search space, as a request gives it: a float or int parameter
    takes ``low``, ``high`` and ``log``, a categorical one ``choices``. An unknown key, or a key
    of the other kind with a value, is refused with its field named (null and ``log: false``
    are accepted anywhere: they are what a full dump of a parameter holds)."""

    model_config = ConfigDict(extra="forbid")

    name: ParameterName
    low: Bound | None = None
    high: Bound | None = None
    log: JsonBool = False
    choices: list[Choice] | None = Field(default=None, max_length=1000)

    @field_validator("low", "high", "log")
    @classmethod
    def _numeric_keys(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("type") == "categorical" and value is not None and value is not False:
            raise ValueError(f"{_named(info)}a categorical parameter takes no {info.field_name}: "
                             "its values are its choices")
        return value

    @field_validator("choices")
    @classmethod
    def _categorical_keys(cls, choices: list[Value] | None, info: ValidationInfo) -> Any:
        kind = info.data.get("type")
        if choices is not None and kind in ("float", "int"):
            raise ValueError(f'{_named(info)}choices go with "type": "categorical"; a {kind} '
                             "parameter takes low and high")
        return choices


def _named(info: ValidationInfo) -> str:
    """The start of an error message: the parameter, where its name is valid."""
    name = info.data.get("name")
    return f"parameter {name!r}: " if name is not None else ""


class SearchSpace(BaseModel):
    parameters: Annotated[list[StoredParameter], Field(min_length=1, max_length=200)]

    @model_validator(mode="after")
    def _unique(self) -> SearchSpace:
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ValueError("parameter names must be unique")
        return self

    @property
    def dim(self) -> int:
        return sum(p.width for p in self.parameters)

    def candidates(self, n: int, seed: int) -> np.ndarray:
        """A study's candidate set: ``n`` rows drawn by :meth:`sample`; where every parameter
        is discrete (int or categorical), ``n`` distinct points: each point once if the space
        has at most ``n`` (:meth:`grid`), else the first ``n`` distinct draws of a longer
        Sobol sequence (fewer if ``MAX_DRAWS`` do not hold them). A repeated point would be an
        identical configuration under another candidate index, evaluated again as a new arm."""
        import numpy as np

        size = self.size()
        if size is None:
            return self.sample(n, seed)
        if size <= n:
            return self.grid()
        limit = min(MAX_DRAWS * n, max(n, MAX_DRAWN_NUMBERS // self.dim))
        draws = n
        while True:
            rows = self.sample(draws, seed)  # each longer draw extends the same sequence
            _, first = np.unique(rows, axis=0, return_index=True)
            if len(first) >= n or draws >= limit:
                return rows[np.sort(first)[:n]]
            draws = min(2 * draws, limit)

    def size(self) -> int | None:
        """The number of distinct points of an entirely discrete space (None with a float)."""
        counts = [_levels(p) for p in self.parameters]
        return None if None in counts else math.prod(counts)  # type: ignore[arg-type]

    def grid(self) -> np.ndarray:
        """Every point of an entirely discrete space once, as feature rows (the last parameter
        varying fastest)."""
        import numpy as np

        shape = [_levels(p) for p in self.parameters]
        assert None not in shape, "only an entirely discrete space has a grid"
        index = np.unravel_index(np.arange(math.prod(shape)), shape)  # type: ignore[arg-type]
        columns = [np.eye(p.width)[k] if p.type == "categorical"
                   else math.ceil(float(p.low)) + k.astype(np.float64)  # type: ignore[arg-type]
                   for p, k in zip(self.parameters, index, strict=True)]
        return np.column_stack(columns).astype(np.float64)

    def sample(self, n: int, seed: int) -> np.ndarray:
        """n candidate rows (n, dim) from a scrambled Sobol sequence in the unit cube."""
        import numpy as np
        from scipy.stats import qmc

        sampler = qmc.Sobol(d=len(self.parameters), scramble=True, seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # n need not be a power of 2
            unit = sampler.random(n)
        columns = [self._column(p, unit[:, j]) for j, p in enumerate(self.parameters)]
        return np.column_stack(columns).astype(np.float64)

    @staticmethod
    def _column(p: StoredParameter, u: np.ndarray) -> np.ndarray:
        import numpy as np

        if p.type == "categorical":
            k = len(p.choices or [])
            return np.eye(k)[np.minimum((u * k).astype(int), k - 1)]
        lo, hi = float(p.low), float(p.high)  # type: ignore[arg-type]
        if p.type == "int":  # the integers in [low, high], each with equal (log-)width
            lo, hi = math.ceil(lo), math.floor(hi)
            if p.log:  # k drawn with probability log((k + 1) / k) / log((hi + 1) / lo)
                return np.minimum(np.floor(lo * ((hi + 1) / lo) ** u), hi)
            return np.minimum(np.floor(lo + u * (hi - lo + 1)), hi)
        if p.log:
            return np.log(lo) + u * (np.log(hi) - np.log(lo))
        return lo + u * (hi - lo)

    def decode(self, row: np.ndarray) -> dict[str, Value]:
        """Named parameter values of one feature row."""
        import numpy as np

        out: dict[str, Value] = {}
        col = 0
        for p in self.parameters:
            if p.type == "categorical":
                out[p.name] = (p.choices or [])[int(np.argmax(row[col : col + p.width]))]
            elif p.type == "int":
                out[p.name] = int(round(row[col]))
            else:
                out[p.name] = float(math.exp(row[col]) if p.log else row[col])
            col += p.width
        return out


def _levels(p: StoredParameter) -> int | None:
    """How many values a discrete parameter takes; None for a float one, and for integers
    beyond 2**53, which float64 features cannot tell apart (they are drawn as before)."""
    if p.type == "categorical":
        return p.width
    low, high = float(p.low), float(p.high)  # type: ignore[arg-type]
    if p.type != "int" or max(abs(low), abs(high)) > EXACT_INTEGERS:
        return None
    return math.floor(high) - math.ceil(low) + 1


def decode_matrix_row(names: list[str], row: np.ndarray) -> dict[str, Any]:
    """Named values of a row of a user-given candidate matrix."""
    return {name: float(x) for name, x in zip(names, row, strict=True)}
