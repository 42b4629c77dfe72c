"""Tests for the test functions and their discretisation into problems.

Expected optima come from the literature (Surjanovic & Bingham's Virtual Library of
Simulation Experiments), not from the implementation under test.
"""

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

from service.problems import FUNCTIONS, TestFunction, function_problem, get_function


def _styblinski_tang_1d() -> tuple[float, float]:
    """1-D Styblinski-Tang minimiser and minimum, found numerically here.

    (The often-quoted -39.16599 is ~1.7e-4 too high; the true value is -39.166166.)
    """
    res = minimize_scalar(
        lambda x: 0.5 * (x**4 - 16 * x**2 + 5 * x),
        bounds=(-5, 0),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return float(res.x), float(res.fun)


_ST_X, _ST_F = _styblinski_tang_1d()

# (name, dim, a literature minimiser, literature minimum)
LITERATURE = [
    ("branin", 2, [-np.pi, 12.275], 0.397887),
    ("branin", 2, [np.pi, 2.275], 0.397887),
    ("branin", 2, [9.42478, 2.475], 0.397887),
    ("hartmann6", 6, [0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573], -3.32237),
    ("eggholder", 2, [512.0, 404.2319], -959.6407),
    ("ackley", 1, [0.0], 0.0),
    ("ackley", 5, [0.0] * 5, 0.0),
    ("levy", 1, [1.0], 0.0),
    ("levy", 4, [1.0] * 4, 0.0),
    ("rosenbrock", 2, [1.0, 1.0], 0.0),
    ("rosenbrock", 7, [1.0] * 7, 0.0),
    ("powell", 4, [0.0] * 4, 0.0),
    ("powell", 8, [0.0] * 8, 0.0),
    ("rastrigin", 3, [0.0] * 3, 0.0),
    ("styblinski_tang", 1, [-2.903534], -39.16617),
    ("styblinski_tang", 3, [-2.903534] * 3, -39.16617 * 3),
    ("styblinski_tang", 5, [_ST_X] * 5, _ST_F * 5),
]
BOUNDS = {
    "branin": [[-5, 10], [0, 15]],
    "hartmann6": [[0, 1]] * 6,
    "eggholder": [[-512, 512]] * 2,
    "ackley": [[-32.768, 32.768]],
    "levy": [[-10, 10]],
    "rosenbrock": [[-5, 10]],
    "powell": [[-4, 5]],
    "rastrigin": [[-5.12, 5.12]],
    "styblinski_tang": [[-5, 5]],
}
CASES = sorted({(name, dim) for name, dim, _, _ in LITERATURE})
LIT_MIN = {(name, dim): fmin for name, dim, _, fmin in LITERATURE}


def _ids(cases):
    return [f"{n}-d{d}" for n, d in cases]


def test_registry_has_required_functions() -> None:
    assert {name for name, _ in CASES} <= set(FUNCTIONS)


@pytest.mark.parametrize(("name", "dim", "xstar", "fmin"), LITERATURE)
def test_value_at_literature_minimiser(name, dim, xstar, fmin) -> None:
    tf = get_function(name, dim)
    assert tf(np.array(xstar)) == pytest.approx(fmin, abs=1e-4)
    assert tf.minimum == pytest.approx(fmin, abs=1e-4)
    np.testing.assert_allclose(tf.fn(tf.minimisers), fmin, atol=1e-4)


@pytest.mark.parametrize(("name", "dim"), CASES, ids=_ids(CASES))
def test_bounds_match_literature(name, dim) -> None:
    tf = get_function(name, dim)
    expected = np.array(BOUNDS[name] * (dim if len(BOUNDS[name]) == 1 else 1), dtype=float)
    np.testing.assert_allclose(tf.bounds, expected)
    assert tf.sign == -1.0


@pytest.mark.parametrize(("name", "dim"), CASES, ids=_ids(CASES))
def test_random_points_not_below_minimum(name, dim) -> None:
    tf = get_function(name, dim)
    rng = np.random.default_rng(123)
    X = rng.uniform(tf.bounds[:, 0], tf.bounds[:, 1], size=(20_000, dim))
    near = tf.minimisers[0] + rng.normal(scale=1e-3, size=(2_000, dim))
    X = np.vstack([X, np.clip(near, tf.bounds[:, 0], tf.bounds[:, 1])])
    assert np.all(tf(X) >= LIT_MIN[(name, dim)] - 1e-4)


@pytest.mark.parametrize(("name", "dim"), CASES, ids=_ids(CASES))
def test_local_search_cannot_improve_minimiser(name, dim) -> None:
    tf = get_function(name, dim)
    for x0 in tf.minimisers:
        res = minimize(lambda x: tf(x), x0, method="L-BFGS-B", bounds=tf.bounds)
        assert res.fun >= tf.minimum - 1e-6


def test_hand_computed_values() -> None:
    e = np.e
    assert get_function("branin")(np.array([0.0, 0.0])) == pytest.approx(
        36 + 10 * (1 - 1 / (8 * np.pi)) + 10
    )
    assert get_function("rosenbrock", 3)(np.zeros(3)) == pytest.approx(2.0)
    assert get_function("rastrigin", 4)(np.full(4, 0.5)) == pytest.approx(4 * 20.25)
    assert get_function("powell", 4)(np.array([3.0, -1.0, 0.0, 1.0])) == pytest.approx(215.0)
    assert get_function("ackley", 3)(np.ones(3)) == pytest.approx(-20 * np.exp(-0.2) - e + 20 + e)
    assert get_function("styblinski_tang", 2)(np.array([1.0, 0.0])) == pytest.approx(-5.0)
    # w = 1 + (x - 1) / 4 = (0,) and (1, 2): only the last term (w_d - 1)^2 = 1 remains.
    assert get_function("levy", 1)(np.array([-3.0])) == pytest.approx(1.0)
    assert get_function("levy", 2)(np.array([1.0, 5.0])) == pytest.approx(1.0)
    # w = (2, 1): only the middle term (w_1 - 1)^2 (1 + 10 sin^2(pi w_1 + 1)) remains.
    assert get_function("levy", 2)(np.array([5.0, 1.0])) == pytest.approx(1 + 10 * np.sin(1) ** 2)


@pytest.mark.parametrize(("name", "dim"), CASES, ids=_ids(CASES))
def test_vectorised_equals_row_by_row(name, dim) -> None:
    tf = get_function(name, dim)
    X = np.random.default_rng(7).uniform(tf.bounds[:, 0], tf.bounds[:, 1], size=(64, dim))
    batch = tf(X)
    assert batch.shape == (64,)
    np.testing.assert_allclose(batch, [tf(row) for row in X], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tf.objective(X), -batch)


@pytest.mark.parametrize(("name", "dim"), CASES, ids=_ids(CASES))
def test_function_problem_contains_optimum(name, dim) -> None:
    p = function_problem(name, dim=dim, n_candidates=500, seed=3)
    tf = get_function(name, dim)
    assert p.candidates.shape == (500, dim)
    assert np.all(p.candidates >= tf.bounds[:, 0]) and np.all(p.candidates <= tf.bounds[:, 1])
    assert p.best_value == pytest.approx(-LIT_MIN[(name, dim)], abs=1e-4)
    np.testing.assert_allclose(p.values, -tf(p.candidates))
    best = p.candidates[p.best_index]
    assert np.min(np.linalg.norm(tf.minimisers - best, axis=1)) < 1e-9


@pytest.mark.parametrize("n", [3, 4, 777, 1024, 2000])
def test_function_problem_candidate_count(n) -> None:
    p = function_problem("branin", n_candidates=n)
    assert p.n_arms == n
    assert len(np.unique(p.candidates, axis=0)) == n


def test_function_problem_is_seeded_and_space_filling() -> None:
    a = function_problem("levy", dim=3, n_candidates=256, noise_sd=0.5, seed=11)
    b = function_problem("levy", dim=3, n_candidates=256, noise_sd=0.5, seed=11)
    c = function_problem("levy", dim=3, n_candidates=256, noise_sd=0.5, seed=12)
    np.testing.assert_array_equal(a.candidates, b.candidates)
    assert not np.array_equal(np.sort(a.candidates, 0), np.sort(c.candidates, 0))
    assert a.noise_sd == 0.5 and a.name.startswith("levy")
    # Sobol points spread over the box: every octant of [-10, 10]^3 is hit.
    octants = {tuple(row) for row in (a.candidates > 0).astype(int)}
    assert len(octants) == 8


def test_default_candidates_and_default_dims() -> None:
    p = function_problem("hartmann6")
    assert p.candidates.shape == (2000, 6)
    assert p.noise_sd == 0.0
    assert get_function("powell").dim % 4 == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "nope"}, "unknown test function"),
        ({"name": "branin", "dim": 3}, "2-dimensional"),
        ({"name": "hartmann6", "dim": 2}, "6-dimensional"),
        ({"name": "powell", "dim": 6}, "multiple of 4"),
        ({"name": "rosenbrock", "dim": 1}, "dim >= 2"),
        ({"name": "levy", "dim": 0}, "dim >= 1"),
        ({"name": "levy", "dim": 2.5}, "integer"),
        ({"name": "levy", "dim": True}, "integer"),
        ({"name": "branin", "n_candidates": 2}, "n_candidates"),
        ({"name": "levy", "n_candidates": 0}, "n_candidates"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, match) -> None:
    kwargs = dict(kwargs)
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=match):
        function_problem(name, **kwargs)


def test_wrong_input_shape_rejected() -> None:
    with pytest.raises(ValueError, match=r"expected shape \(n, 2\)"):
        get_function("branin")(np.zeros((4, 3)))


def test_testfunction_is_not_collected_and_validates() -> None:
    assert TestFunction.__test__ is False
    with pytest.raises(ValueError, match="bounds"):
        TestFunction("x", 1, [[1.0, 0.0]], lambda X: X[:, 0], 0.0, [[0.5]])
