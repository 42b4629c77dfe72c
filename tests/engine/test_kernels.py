"""Kernels: formulas, positive semi-definiteness, block evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import RBF, Linear, Matern52, make_kernel


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
