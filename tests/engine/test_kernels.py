"""Kernels: formulas, positive semi-definiteness, block evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import RBF, ConfigError, Linear, Matern52, make_kernel


def test_rbf_uses_the_papers_bandwidth_convention():
    x, y = np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])
    assert RBF(lengthscale=5.0)(x, y)[0, 0] == pytest.approx(np.exp(-25 / 50))


def test_matern52_formula():
    r, ell = 1.3, 0.7
    s = np.sqrt(5) * r / ell
    expected = (1 + s + s * s / 3) * np.exp(-s)
    assert Matern52(lengthscale=ell)(np.zeros((1, 1)), np.array([[r]]))[0, 0] == \
        pytest.approx(expected)


@pytest.mark.parametrize("kernel", [RBF(lengthscale=0.5, variance=2.0), Matern52(1.5),
                                    Linear(variance=0.5, offset=1.0)])
def test_kernels_are_symmetric_psd_with_consistent_diagonal(kernel):
    X = np.random.default_rng(0).standard_normal((40, 3))
    K = kernel(X, X)
    np.testing.assert_allclose(K, K.T, atol=1e-12)
    np.testing.assert_allclose(np.diag(K), kernel.diag(X), rtol=1e-10)
    assert np.linalg.eigvalsh(K).min() > -1e-9 * np.abs(K).max()


def test_block_evaluation_equals_the_full_matrix():
    rng = np.random.default_rng(1)
    X, Y = rng.random((103, 5)), rng.random((7, 5))
    kernel = RBF(lengthscale=0.8)
    full = kernel(X, Y)
    parts = np.empty_like(full)
    for rows, block in kernel.blocks(X, Y, block_rows=10):
        parts[rows] = block
    np.testing.assert_allclose(parts, full, rtol=1e-13)


def test_distances_never_go_negative_for_far_away_large_coordinates():
    X = np.array([[1e8, 1e8], [1e8, 1e8 + 1e-3]])
    K = RBF(lengthscale=1.0)(X, X)
    assert np.all(K <= 1.0) and np.all(K >= 0.0)


def test_make_kernel_round_trip():
    kernel = Matern52(lengthscale=2.5, variance=0.3)
    assert make_kernel(kernel.to_dict()) == kernel
    assert make_kernel({"name": "gaussian", "lengthscale": 2.0}) == RBF(lengthscale=2.0)


@pytest.mark.parametrize("spec", [{"name": "rbf", "lengthscale": 0.7, "variance": 2.0},
                                  {"name": "matern52", "lengthscale": 1.3}, {"name": "linear"}])
def test_kernel_into_a_buffer_equals_the_kernel_matrix(spec):
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(50, 4)), rng.normal(size=(7, 4))
    kernel = make_kernel(spec)
    out = np.full((50, 7), np.nan)
    assert kernel.into(X, Y, out) is out
    np.testing.assert_allclose(out, kernel(X, Y), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["rbf", "matern52"])
def test_one_lengthscale_per_dimension_divides_each_column_by_its_own(name):
    """k(x, x') with lengthscales l_j is the one-lengthscale kernel (l = 1) on x_j / l_j."""
    rng = np.random.default_rng(3)
    X, Y = rng.normal(size=(60, 3)), rng.normal(size=(9, 3))
    ell = np.array([0.3, 1.0, 4.0])
    kernel = make_kernel({"name": name, "lengthscale": ell.tolist(), "variance": 1.7})
    unit = make_kernel({"name": name, "lengthscale": 1.0, "variance": 1.7})
    expected = unit(X / ell, Y / ell)
    np.testing.assert_allclose(kernel(X, Y), expected, rtol=1e-12)
    np.testing.assert_allclose(kernel.into(X, Y, np.empty((60, 9))), expected, rtol=1e-12,
                               atol=1e-15)
    assert kernel.to_dict()["lengthscale"] == [0.3, 1.0, 4.0]
    assert make_kernel(kernel.to_dict()) == kernel
    K = kernel(X, X)
    assert np.linalg.eigvalsh(K).min() > -1e-9


@pytest.mark.parametrize("lengthscale, message", [
    ([], "non-empty list"), ([1.0, -2.0], "must lie in"), ([1.0, "2"], "must be a number"),
    ([1.0, float("nan")], "must lie in"), ([True], "must be a number")])
def test_a_bad_lengthscale_list_names_the_field(lengthscale, message):
    with pytest.raises(ConfigError, match=message) as info:
        make_kernel({"name": "rbf", "lengthscale": lengthscale})
    assert info.value.field == "kernel.lengthscale"
