"""Standard continuous test functions and their discretisation into :class:`Problem` s.

Every function ``fn`` here is the usual *minimisation* benchmark, vectorised over rows:
``fn(X)`` maps an ``(n, d)`` array to an ``(n,)`` array. A :class:`TestFunction` carries
its box, known minimum and minimisers, and ``sign = -1`` so that ``sign * fn`` is the
objective the service *maximises*. :func:`function_problem` turns a function into a
finite-arm :class:`Problem` by scrambled-Sobol discretisation of its box, with the
known minimisers added so that ``best_value == -minimum`` exactly.

Formulas and optima follow the Virtual Library of Simulation Experiments
(Surjanovic & Bingham, https://www.sfu.ca/~ssurjano/optimization.html). Minimisers
of Hartmann-6, Eggholder and Styblinski-Tang were refined numerically; note that
the often-quoted Styblinski-Tang minimum ``-39.16599 d`` is off by ``1.7e-4 d``:
the true value at ``x_i = -2.9035340...`` is ``-39.1661657... d``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .problem import Problem

__all__ = ["FUNCTIONS", "FunctionSpec", "TestFunction", "function_problem", "get_function"]

ArrayFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, eq=False)
class TestFunction:
    """A test function on a box with its known global minimum.

    Attributes:
        name: registry name, e.g. ``"levy"``.
        dim: input dimension ``d``.
        bounds: ``(d, 2)`` array of ``[low, high]`` per coordinate.
        fn: vectorised function ``(n, d) -> (n,)`` (the minimisation form).
        minimum: global minimum of ``fn`` on the box.
        minimisers: ``(k, d)`` array of known global minimisers (``k >= 1``).
        sign: multiply ``fn`` by this to get the objective to maximise (``-1``).
    """

    __test__ = False  # not a pytest test class despite the name

    name: str
    dim: int
    bounds: np.ndarray
    fn: ArrayFn
    minimum: float
    minimisers: np.ndarray
    sign: float = -1.0

    def __post_init__(self) -> None:
        bounds = np.array(self.bounds, dtype=np.float64)
        mins = np.atleast_2d(np.array(self.minimisers, dtype=np.float64))
        if bounds.shape != (self.dim, 2) or not np.all(bounds[:, 0] < bounds[:, 1]):
            raise ValueError(f"{self.name}: bounds must be ({self.dim}, 2) with low < high")
        if mins.ndim != 2 or mins.shape[1] != self.dim or mins.shape[0] == 0:
            raise ValueError(f"{self.name}: minimisers must have shape (k, {self.dim})")
        if self.sign not in (1.0, -1.0):
            raise ValueError(f"{self.name}: sign must be +1 or -1")
        bounds.setflags(write=False)
        mins.setflags(write=False)
        object.__setattr__(self, "bounds", bounds)
        object.__setattr__(self, "minimisers", mins)

    def __call__(self, X: np.ndarray) -> np.ndarray | float:
        """Evaluate ``fn`` on ``(n, d)`` rows (-> ``(n,)``) or on one ``(d,)`` point (-> float)."""
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim == 1 and arr.shape[0] == self.dim:
            return float(self.fn(arr[None, :])[0])
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ValueError(f"{self.name}: expected shape (n, {self.dim}), got {arr.shape}")
        return self.fn(arr)

    def objective(self, X: np.ndarray) -> np.ndarray | float:
        """The objective to maximise, ``sign * fn(X)``; same shapes as ``__call__``."""
        return self.sign * self(X)


# --------------------------------------------------------------------- formulas
def _branin(X: np.ndarray) -> np.ndarray:
    x1, x2 = X[:, 0], X[:, 1]
    b, c, t = 5.1 / (4 * np.pi**2), 5 / np.pi, 1 / (8 * np.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * np.cos(x1) + 10


_H6_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H6_A = np.array(
    [
        [10, 3, 17, 3.5, 1.7, 8],
        [0.05, 10, 17, 0.1, 8, 14],
        [3, 3.5, 1.7, 10, 17, 8],
        [17, 8, 0.05, 10, 0.1, 14],
    ]
)
_H6_P = 1e-4 * np.array(
    [
        [1312, 1696, 5569, 124, 8283, 5886],
        [2329, 4135, 8307, 3736, 1004, 9991],
        [2348, 1451, 3522, 2883, 3047, 6650],
        [4047, 8828, 8732, 5743, 1091, 381],
    ]
)


def _hartmann6(X: np.ndarray) -> np.ndarray:
    inner = np.sum(_H6_A * (X[:, None, :] - _H6_P) ** 2, axis=2)  # (n, 4)
    return -np.exp(-inner) @ _H6_ALPHA


def _ackley(X: np.ndarray) -> np.ndarray:
    r = np.sqrt(np.mean(X**2, axis=1))
    return -20 * np.exp(-0.2 * r) - np.exp(np.mean(np.cos(2 * np.pi * X), axis=1)) + 20 + np.e


def _levy(X: np.ndarray) -> np.ndarray:
    w = 1 + (X - 1) / 4
    head = np.sin(np.pi * w[:, 0]) ** 2
    wi = w[:, :-1]
    middle = np.sum((wi - 1) ** 2 * (1 + 10 * np.sin(np.pi * wi + 1) ** 2), axis=1)
    wd = w[:, -1]
    return head + middle + (wd - 1) ** 2 * (1 + np.sin(2 * np.pi * wd) ** 2)


def _rosenbrock(X: np.ndarray) -> np.ndarray:
    return np.sum(100 * (X[:, 1:] - X[:, :-1] ** 2) ** 2 + (X[:, :-1] - 1) ** 2, axis=1)


def _eggholder(X: np.ndarray) -> np.ndarray:
    x1, x2 = X[:, 0], X[:, 1]
    return -(x2 + 47) * np.sin(np.sqrt(np.abs(x2 + x1 / 2 + 47))) - x1 * np.sin(
        np.sqrt(np.abs(x1 - (x2 + 47)))
    )


def _powell(X: np.ndarray) -> np.ndarray:
    blocks = X.reshape(X.shape[0], -1, 4)
    a, b, c, e = blocks[..., 0], blocks[..., 1], blocks[..., 2], blocks[..., 3]
    terms = (a + 10 * b) ** 2 + 5 * (c - e) ** 2 + (b - 2 * c) ** 4 + 10 * (a - e) ** 4
    return np.sum(terms, axis=1)


def _rastrigin(X: np.ndarray) -> np.ndarray:
    return 10 * X.shape[1] + np.sum(X**2 - 10 * np.cos(2 * np.pi * X), axis=1)


def _styblinski_tang(X: np.ndarray) -> np.ndarray:
    return 0.5 * np.sum(X**4 - 16 * X**2 + 5 * X, axis=1)


# ------------------------------------------------------------ known optima
_H6_XSTAR = [0.2016895091, 0.1500106935, 0.4768739729, 0.2753324275, 0.3116516172, 0.6573005346]
_H6_MIN = -3.32236801141551
_EGG_XSTAR = [512.0, 404.2318051201336]
_EGG_MIN = -959.6406627208507
# Smallest root of d/dx (x^4 - 16 x^2 + 5 x) = 4 x^3 - 32 x + 5, i.e. x = -2.90353403...
_ST_X = float(np.min(np.roots([4.0, 0.0, -32.0, 5.0]).real))
_ST_MIN_1D = 0.5 * (_ST_X**4 - 16 * _ST_X**2 + 5 * _ST_X)


def _box(dim: int, low: float, high: float) -> np.ndarray:
    return np.tile([low, high], (dim, 1)).astype(np.float64)


def _point(dim: int, value: float) -> np.ndarray:
    return np.full((1, dim), value, dtype=np.float64)


@dataclass(frozen=True)
class FunctionSpec:
    """Registry entry: builds a :class:`TestFunction` for an admissible dimension.

    ``fixed_dim`` is set for fixed-dimension functions; otherwise any
    ``dim >= min_dim`` that is a multiple of ``dim_multiple`` is accepted.
    """

    name: str
    build: Callable[[int], TestFunction]
    default_dim: int
    fixed_dim: int | None = None
    min_dim: int = 1
    dim_multiple: int = 1

    def make(self, dim: int | None = None) -> TestFunction:
        """Return the function in dimension ``dim`` (``None``: the default)."""
        if dim is None:
            dim = self.default_dim
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
            raise ValueError(f"{self.name}: dim must be an integer, got {dim!r}")
        dim = int(dim)
        if self.fixed_dim is not None and dim != self.fixed_dim:
            raise ValueError(f"{self.name} is {self.fixed_dim}-dimensional; got dim={dim}")
        if dim < self.min_dim:
            raise ValueError(f"{self.name} needs dim >= {self.min_dim}; got dim={dim}")
        if dim % self.dim_multiple:
            raise ValueError(f"{self.name} needs dim a multiple of {self.dim_multiple}; got {dim}")
        return self.build(dim)


def _spec(
    name: str, fn: ArrayFn, box: tuple[float, float], xstar: float, fmin: float, **kw: int
) -> FunctionSpec:
    """Variable-dimension spec: box ``box^d``, minimiser ``(xstar, ..., xstar)``, min ``fmin``."""

    def build(d: int) -> TestFunction:
        return TestFunction(name, d, _box(d, *box), fn, fmin, _point(d, xstar))

    return FunctionSpec(name, build, default_dim=kw.pop("default_dim", 2), **kw)


def _build_branin(d: int) -> TestFunction:
    xstar = np.array([[-np.pi, 12.275], [np.pi, 2.275], [3 * np.pi, 2.475]])
    return TestFunction("branin", d, [[-5.0, 10.0], [0.0, 15.0]], _branin, 5 / (4 * np.pi), xstar)


def _build_hartmann6(d: int) -> TestFunction:
    return TestFunction("hartmann6", d, _box(d, 0.0, 1.0), _hartmann6, _H6_MIN, [_H6_XSTAR])


def _build_eggholder(d: int) -> TestFunction:
    return TestFunction("eggholder", d, _box(d, -512.0, 512.0), _eggholder, _EGG_MIN, [_EGG_XSTAR])


def _build_styblinski_tang(d: int) -> TestFunction:
    bounds, xstar = _box(d, -5.0, 5.0), _point(d, _ST_X)
    return TestFunction("styblinski_tang", d, bounds, _styblinski_tang, _ST_MIN_1D * d, xstar)


FUNCTIONS: dict[str, FunctionSpec] = {
    "branin": FunctionSpec("branin", _build_branin, default_dim=2, fixed_dim=2),
    "hartmann6": FunctionSpec("hartmann6", _build_hartmann6, default_dim=6, fixed_dim=6),
    "eggholder": FunctionSpec("eggholder", _build_eggholder, default_dim=2, fixed_dim=2),
    "ackley": _spec("ackley", _ackley, (-32.768, 32.768), 0.0, 0.0),
    "levy": _spec("levy", _levy, (-10.0, 10.0), 1.0, 0.0),
    "rosenbrock": _spec("rosenbrock", _rosenbrock, (-5.0, 10.0), 1.0, 0.0, min_dim=2),
    "powell": _spec("powell", _powell, (-4.0, 5.0), 0.0, 0.0, default_dim=4, dim_multiple=4),
    "rastrigin": _spec("rastrigin", _rastrigin, (-5.12, 5.12), 0.0, 0.0),
    "styblinski_tang": FunctionSpec("styblinski_tang", _build_styblinski_tang, default_dim=2),
}


def get_function(name: str, dim: int | None = None) -> TestFunction:
    """Look up ``name`` in :data:`FUNCTIONS` and build it in dimension ``dim``."""
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in FUNCTIONS:
        raise ValueError(f"unknown test function {name!r}; choose one of {sorted(FUNCTIONS)}")
    return FUNCTIONS[key].make(dim)


def _sobol(bounds: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``(n, d)`` scrambled Sobol points scaled to ``bounds``."""
    if n == 0:
        return np.empty((0, bounds.shape[0]))
    from scipy.stats import qmc  # here, not at import: 0.4 s of every server start-up

    sampler = qmc.Sobol(d=bounds.shape[0], scramble=True, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # balance warning for n != 2^m
        unit = sampler.random(n)
    return qmc.scale(unit, bounds[:, 0], bounds[:, 1])


def function_problem(
    name: str,
    *,
    dim: int | None = None,
    n_candidates: int = 2000,
    noise_sd: float = 0.0,
    seed: int = 0,
) -> Problem:
    """Discretise a test function into a maximisation :class:`Problem`.

    The ``n_candidates`` arms (exactly) are the known global minimisers lying in the
    box plus ``n_candidates - k`` scrambled Sobol points, shuffled together (seeded).
    ``values = -fn(candidates)``, so ``best_value == -minimum`` (the true optimum).
    """
    tf = get_function(name, dim)
    if isinstance(n_candidates, bool) or not isinstance(n_candidates, int | np.integer):
        raise ValueError(f"n_candidates must be an integer, got {n_candidates!r}")
    lo, hi = tf.bounds[:, 0], tf.bounds[:, 1]
    inside = np.all((tf.minimisers >= lo) & (tf.minimisers <= hi), axis=1)
    optima = tf.minimisers[inside]
    if n_candidates < max(1, optima.shape[0]):
        raise ValueError(
            f"n_candidates must be >= {max(1, optima.shape[0])} for {tf.name}, got {n_candidates}"
        )
    points = np.vstack([_sobol(tf.bounds, int(n_candidates) - optima.shape[0], seed), optima])
    points = points[np.random.default_rng(seed).permutation(points.shape[0])]
    values = tf.sign * tf.fn(points)
    return Problem(f"{tf.name}_d{tf.dim}", points, values, noise_sd)
