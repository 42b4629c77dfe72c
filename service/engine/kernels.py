"""Kernels k(x, x') evaluated in bounded-memory row blocks.

All kernels are stationary or dot-product kernels on rows of float64 matrices. ``kappa2`` is an
upper bound on k(x, x) over the candidate set (kappa^2 of the BKB and BBKB papers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

#: Rows per block when a kernel matrix against all candidates is needed (about 16 MB at m = 256).
DEFAULT_BLOCK_ROWS = 8192


def _sq_dists(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances, shape (n, m), through one matrix product (clipped at 0)."""
    d2 = np.einsum("ij,ij->i", X, X)[:, None] + np.einsum("ij,ij->i", Y, Y)[None, :]
    d2 -= 2.0 * (X @ Y.T)
    np.maximum(d2, 0.0, out=d2)
    return d2


class Kernel(ABC):
    """A positive-definite kernel with a serialisable parameter dictionary."""

    name: str

    @abstractmethod
    def __call__(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """Kernel matrix of shape (len(X), len(Y))."""

    @abstractmethod
    def diag(self, X: np.ndarray) -> np.ndarray:
        """k(x, x) for every row of X, shape (len(X),)."""

    @abstractmethod
    def params(self) -> dict[str, float | list[float]]:
        """Parameters as plain floats or lists of them (for persistence and display)."""

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, **self.params()}

    def into(self, X: np.ndarray, Y: np.ndarray, out: np.ndarray) -> np.ndarray:
        """k(X, Y) written into ``out`` (shape (len(X), len(Y))), for hot loops over blocks."""
        out[...] = self(X, Y)
        return out

    def blocks(
        self, X: np.ndarray, Y: np.ndarray, block_rows: int = DEFAULT_BLOCK_ROWS
    ) -> Iterator[tuple[slice, np.ndarray]]:
        """Yield (row slice, k(X[slice], Y)) so that the full kernel matrix never exists at once."""
        for start in range(0, len(X), block_rows):
            rows = slice(start, min(start + block_rows, len(X)))
            yield rows, self(X[rows], Y)


#: The range of a kernel parameter: far beyond any useful bandwidth or scale, and inside it
#: the squares and products of kernel evaluations stay within float64 (1e-160 squared is 0).
PARAMETER_RANGE = (1e-30, 1e30)


def _number(name: str, value: object) -> float:
    """``value`` as a float if it is a number (not a bool or a numeric string)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ConfigError(f"kernel {name} must be a number, got {value!r}",
                          field=f"kernel.{name}")
    try:
        return float(value)
    except OverflowError:  # an int beyond float64: outside every range
        raise ConfigError(f"kernel {name} must be a number within float64's range, got an "
                          "integer beyond it", field=f"kernel.{name}") from None


def _positive(name: str, value: object) -> float:
    out = _number(name, value)
    low, high = PARAMETER_RANGE
    if not low <= out <= high:  # NaN fails too
        raise ConfigError(f"kernel {name} must lie in [{low:g}, {high:g}], got {out!r}",
                          field=f"kernel.{name}")
    return out


def _lengthscale(value: object) -> float | tuple[float, ...]:
    """One lengthscale (a number, or a list of one: what a batch records for one) or one per
    input dimension (a list of numbers)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()  # a 0-d array is a number
    if isinstance(value, list | tuple):
        if len(value) == 0:
            raise ConfigError("kernel lengthscale must be a number or a non-empty list of "
                              "numbers, one per dimension", field="kernel.lengthscale")
        values = tuple(_positive("lengthscale", v) for v in value)
        return values if len(values) > 1 else values[0]
    return _positive("lengthscale", value)


def _scaled(X: np.ndarray, lengthscale: float | tuple[float, ...]) -> np.ndarray:
    """X divided by the lengthscale(s) column by column; ValueError if their number is not d."""
    ls = np.asarray(lengthscale, dtype=np.float64)
    if ls.ndim and ls.shape != X.shape[1:]:
        raise ValueError(f"{len(ls)} lengthscales for inputs of {X.shape[1]} dimensions")
    return X / ls


def check_lengthscales(kernel: Kernel, dim: int) -> None:
    """ConfigError unless the kernel's lengthscale is one number or ``dim`` of them."""
    lengthscale = getattr(kernel, "lengthscale", None)
    if isinstance(lengthscale, tuple) and len(lengthscale) != dim:
        raise ConfigError(f"kernel lengthscale holds {len(lengthscale)} values for candidates of "
                          f"{dim} columns: give one number, or one per column",
                          field="kernel.lengthscale")


@dataclass(frozen=True)
class RBF(Kernel):
    """Gaussian kernel variance * exp(-||x - x'||^2 / (2 lengthscale^2)).

    ``lengthscale`` is the papers' bandwidth sigma: one number, or one per input dimension
    (ARD: ||.||^2 becomes sum_j (x_j - x'_j)^2 / l_j^2).
    """

    lengthscale: float | tuple[float, ...] = 1.0
    variance: float = 1.0
    name = "rbf"

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengthscale", _lengthscale(self.lengthscale))
        object.__setattr__(self, "variance", _positive("variance", self.variance))

    def __call__(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        if isinstance(self.lengthscale, tuple):
            K = _sq_dists(_scaled(X, self.lengthscale), _scaled(Y, self.lengthscale))
            K *= -0.5
        else:
            K = _sq_dists(X, Y)
            K *= -0.5 / self.lengthscale**2
        np.exp(K, out=K)
        K *= self.variance
        return K

    def into(self, X: np.ndarray, Y: np.ndarray, out: np.ndarray) -> np.ndarray:
        """In place: -||x - y||^2 / 2l^2 = x'.y' - |x'|^2/2 - |y'|^2/2 with x' = x / l, no temporary
        of the output's size (the resparsification's kernel blocks, A x m)."""
        Xs, Ys = _scaled(X, self.lengthscale), _scaled(Y, self.lengthscale)
        np.matmul(Xs, Ys.T, out=out)
        out -= 0.5 * np.einsum("ij,ij->i", Xs, Xs)[:, None]
        out -= 0.5 * np.einsum("ij,ij->i", Ys, Ys)[None, :]
        np.minimum(out, 0.0, out=out)  # the clip of the squared distance at 0
        np.exp(out, out=out)
        out *= self.variance
        return out

    def diag(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.variance)

    def params(self) -> dict[str, float | list[float]]:
        return {"lengthscale": _plain(self.lengthscale), "variance": self.variance}


@dataclass(frozen=True)
class Matern52(Kernel):
    """Matern-5/2: variance * (1 + sqrt5 r/l + 5 r^2 / (3 l^2)) exp(-sqrt5 r / l)."""

    lengthscale: float | tuple[float, ...] = 1.0  # one, or one per dimension (as RBF's)
    variance: float = 1.0
    name = "matern52"

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengthscale", _lengthscale(self.lengthscale))
        object.__setattr__(self, "variance", _positive("variance", self.variance))

    def __call__(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        if isinstance(self.lengthscale, tuple):
            s = np.sqrt(5.0 * _sq_dists(_scaled(X, self.lengthscale),
                                        _scaled(Y, self.lengthscale)))
        else:
            s = np.sqrt(5.0 * _sq_dists(X, Y)) / self.lengthscale
        return self.variance * (1.0 + s + s * s / 3.0) * np.exp(-s)

    def diag(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.variance)

    def params(self) -> dict[str, float | list[float]]:
        return {"lengthscale": _plain(self.lengthscale), "variance": self.variance}


@dataclass(frozen=True)
class Linear(Kernel):
    """Linear kernel variance * <x, x'> + offset."""

    variance: float = 1.0
    offset: float = 0.0
    name = "linear"

    def __post_init__(self) -> None:
        object.__setattr__(self, "variance", _positive("variance", self.variance))
        offset = _number("offset", self.offset)
        if not 0.0 <= offset <= PARAMETER_RANGE[1]:
            raise ConfigError(f"kernel offset must lie in [0, {PARAMETER_RANGE[1]:g}], got "
                              f"{offset!r}", field="kernel.offset")
        object.__setattr__(self, "offset", offset)

    def __call__(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        return self.variance * (X @ Y.T) + self.offset

    def diag(self, X: np.ndarray) -> np.ndarray:
        return self.variance * np.einsum("ij,ij->i", X, X) + self.offset

    def params(self) -> dict[str, float]:
        return {"variance": self.variance, "offset": self.offset}


def _plain(lengthscale: float | tuple[float, ...]) -> float | list[float]:
    """A lengthscale as JSON has it: a number, or a list."""
    return list(lengthscale) if isinstance(lengthscale, tuple) else lengthscale


KERNELS: dict[str, type[Kernel]] = {"rbf": RBF, "gaussian": RBF, "matern52": Matern52,
                                    "linear": Linear}


def make_kernel(spec: Kernel | dict[str, object] | None = None) -> Kernel:
    """Build a kernel from ``{"name": "rbf", "lengthscale": 2.0}`` (or pass a Kernel through)."""
    if spec is None:
        return RBF()
    if isinstance(spec, Kernel):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"kernel must be an object such as {{'name': 'rbf', 'lengthscale': 2}}"
                          f", got {spec!r}", field="kernel")
    params = dict(spec)
    name = str(params.pop("name", "rbf")).lower()
    if name not in KERNELS:
        raise ConfigError(f"unknown kernel {name!r}; choose one of {sorted(set(KERNELS))}",
                          field="kernel.name")
    try:
        return KERNELS[name](**params)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ConfigError(f"bad parameters for kernel {name!r}: {exc}", field="kernel") from exc
