"""GP likelihoods: analytic gradients, the exact density, Titsias' bound against the exact."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from service.engine.kernels import RBF, Matern52
from service.engine.likelihoods import (
    exact_log_likelihood,
    sparse_log_likelihood,
    squared_distances,
)

from .helpers import noisy_data

THETAS = [np.log([0.5, 1.3, 0.05]), np.log([0.3, 0.7, 1.1, 1.3, 0.05])]


@pytest.mark.parametrize("kernel", ["rbf", "matern52"])
@pytest.mark.parametrize("theta", THETAS, ids=["isotropic", "ard"])
@pytest.mark.parametrize("sparse", [False, True], ids=["exact", "titsias"])
def test_analytic_gradient_matches_finite_differences(kernel, theta, sparse):
    X, y = noisy_data()
    Z = X[::4] + 0.01

    def f(t: np.ndarray) -> tuple[float, np.ndarray]:
        if sparse:
            return sparse_log_likelihood(t, X, y, Z, kernel)
        return exact_log_likelihood(t, X, y, kernel)

    value, grad = f(theta)
    assert np.isfinite(value)
    numeric = optimize.approx_fprime(theta, lambda t: f(t)[0], 1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-4 * np.abs(grad).max())


@pytest.mark.parametrize("kernel", ["rbf", "matern52"])
def test_exact_likelihood_is_the_gaussian_density(kernel):
    X, y = noisy_data(n=20)
    theta = np.log([0.4, 0.8, 0.03])
    k = (RBF if kernel == "rbf" else Matern52)(lengthscale=0.4, variance=0.8)
    cov = k(X, X) + 0.03 * np.eye(len(X))
    sign, logdet = np.linalg.slogdet(cov)
    expected = -0.5 * (y @ np.linalg.solve(cov, y) + logdet + len(y) * np.log(2 * np.pi))
    assert exact_log_likelihood(theta, X, y, kernel)[0] == pytest.approx(expected, rel=1e-10)
    once = exact_log_likelihood(theta, X, y, kernel, squared_distances(X))  # a fit's shortcut
    np.testing.assert_array_equal(once[1], exact_log_likelihood(theta, X, y, kernel)[1])


def test_titsias_bound_equals_exact_with_every_point_inducing_and_is_below_otherwise():
    X, y = noisy_data(n=40)
    theta = np.log([0.5, 1.3, 0.05])
    exact = exact_log_likelihood(theta, X, y)[0]
    assert sparse_log_likelihood(theta, X, y, X)[0] == pytest.approx(exact, abs=1e-4)
    assert sparse_log_likelihood(theta, X, y, X[:8])[0] < exact


@pytest.mark.parametrize("noise", [1e-3, 1e-4, 1e-6])
def test_titsias_bound_stays_finite_and_below_exact_on_a_dense_dictionary(noise):
    """128 inducing points among 400 in the unit square at lengthscale 1: K_mm is numerically
    singular (jitter only). The bound must stay finite and below the exact likelihood, which
    a Cholesky of K_mm + K_mn K_nm / noise did not (-inf from 1e-4, 0.24 nats above at 1e-3)."""
    rng = np.random.default_rng(0)
    X = rng.random((400, 2))
    y = np.sin(3.0 * X[:, 0]) + np.cos(2.0 * X[:, 1]) + 0.03 * rng.standard_normal(400)
    theta = np.log([1.0, 1.0, noise])
    exact = exact_log_likelihood(theta, X, y)[0]
    bound = sparse_log_likelihood(theta, X, y, X[:128])[0]
    assert np.isfinite(exact) and np.isfinite(bound) and bound <= exact + 1e-6
