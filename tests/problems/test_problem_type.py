"""Tests for the Problem container: validation, observe, best arm and regret."""

import numpy as np
import pytest

from service.problems import Problem


def _small() -> Problem:
    cands = np.arange(8.0).reshape(4, 2)
    return Problem("toy", cands, np.array([0.5, 2.0, -1.0, 2.0]), noise_sd=0.1)


def test_best_value_and_first_best_index() -> None:
    p = _small()
    assert p.best_value == 2.0
    assert p.best_index == 1
    assert p.n_arms == 4 and p.dim == 2


def test_regret_matches_hand_computation() -> None:
    p = _small()
    np.testing.assert_allclose(p.regret(np.array([0, 2, 1, 3])), [1.5, 4.5, 4.5, 4.5])
    assert p.regret(np.array([], dtype=int)).shape == (0,)


def test_regret_ratio_is_one_for_the_uniform_policy_in_expectation() -> None:
    p = _small()
    every = np.tile(np.arange(len(p.values)), 25)  # each arm as often: uniform's average
    assert p.regret_ratio(every)[-1] == pytest.approx(1.0)
    best = int(np.argmax(p.values))
    np.testing.assert_array_equal(p.regret_ratio(np.full(5, best)), np.zeros(5))


def test_arrays_are_copied_and_read_only() -> None:
    cands = np.zeros((3, 1))
    vals = np.array([1.0, 2.0, 3.0])
    p = Problem("ro", cands, vals, 0.0)
    vals[0] = 100.0
    assert p.values[0] == 1.0
    with pytest.raises(ValueError):
        p.values[0] = 5.0


@pytest.mark.parametrize(
    ("cands", "vals", "sd", "match"),
    [
        (np.zeros(3), np.zeros(3), 0.0, "shape"),
        (np.zeros((0, 2)), np.zeros(0), 0.0, "shape"),
        (np.zeros((3, 2)), np.zeros(4), 0.0, "values must have shape"),
        (np.zeros((3, 2)), np.zeros((3, 1)), 0.0, "values must have shape"),
        (np.array([[0.0], [np.nan]]), np.zeros(2), 0.0, "candidates contain NaN"),
        (np.zeros((2, 1)), np.array([0.0, np.inf]), 0.0, "values contain NaN"),
        (np.zeros((2, 1)), np.zeros(2), -1.0, "noise_sd"),
        (np.zeros((2, 1)), np.zeros(2), float("nan"), "noise_sd"),
    ],
)
def test_invalid_problems_raise(cands, vals, sd, match) -> None:
    with pytest.raises(ValueError, match=match):
        Problem("bad", cands, vals, sd)


def test_empty_name_rejected() -> None:
    with pytest.raises(ValueError, match="name"):
        Problem("", np.zeros((1, 1)), np.zeros(1), 0.0)


@pytest.mark.parametrize("index", [4, -1, np.array([0, 7]), 1.5, np.array([True])])
def test_bad_indices_raise(index) -> None:
    with pytest.raises(ValueError, match="indices"):
        _small().observe(index, np.random.default_rng(0))


def test_regret_rejects_2d_selection() -> None:
    with pytest.raises(ValueError, match="1-D"):
        _small().regret(np.zeros((2, 2), dtype=int))


def test_observe_shapes_and_types() -> None:
    p = _small()
    rng = np.random.default_rng(1)
    assert isinstance(p.observe(1, rng), float)
    assert isinstance(p.observe(np.int64(1), rng), float)
    assert p.observe(np.array([[0, 1], [2, 3]]), rng).shape == (2, 2)
    noiseless = Problem("nl", p.candidates, p.values, 0.0)
    np.testing.assert_array_equal(noiseless.observe(np.arange(4), rng), p.values)
    with pytest.raises(TypeError):
        p.observe(0, np.random.RandomState(0))  # legacy generator is refused
