"""Kernel hyper-parameters: likelihood gradients, recovery of a known lengthscale, engine use."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from service.engine.hyperparameters import (
    Prior,
    exact_log_likelihood,
    fit,
    median_distance,
    sparse_log_likelihood,
)
from service.engine.kernels import RBF, Matern52


def _data(n: int = 50, d: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    return X, np.sin(3.0 * X[:, 0]) + X[:, 1] ** 2 + 0.1 * rng.standard_normal(n)


THETAS = [np.log([0.5, 1.3, 0.05]), np.log([0.3, 0.7, 1.1, 1.3, 0.05])]


@pytest.mark.parametrize("kernel", ["rbf", "matern52"])
@pytest.mark.parametrize("theta", THETAS, ids=["isotropic", "ard"])
@pytest.mark.parametrize("sparse", [False, True], ids=["exact", "titsias"])
def test_analytic_gradient_matches_finite_differences(kernel, theta, sparse):
    X, y = _data()
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
    X, y = _data(n=20)
    theta = np.log([0.4, 0.8, 0.03])
    k = (RBF if kernel == "rbf" else Matern52)(lengthscale=0.4, variance=0.8)
    cov = k(X, X) + 0.03 * np.eye(len(X))
    sign, logdet = np.linalg.slogdet(cov)
    expected = -0.5 * (y @ np.linalg.solve(cov, y) + logdet + len(y) * np.log(2 * np.pi))
    assert exact_log_likelihood(theta, X, y, kernel)[0] == pytest.approx(expected, rel=1e-10)


def test_titsias_bound_equals_exact_with_every_point_inducing_and_is_below_otherwise():
    X, y = _data(n=40)
    theta = np.log([0.5, 1.3, 0.05])
    exact = exact_log_likelihood(theta, X, y)[0]
    assert sparse_log_likelihood(theta, X, y, X)[0] == pytest.approx(exact, abs=1e-4)
    assert sparse_log_likelihood(theta, X, y, X[:8])[0] < exact


@pytest.mark.parametrize("sparse", [False, True], ids=["exact", "titsias"])
@pytest.mark.parametrize("true_lengthscale", [0.15, 0.6])
def test_fit_recovers_a_known_lengthscale_within_a_factor_two(true_lengthscale, sparse):
    rng = np.random.default_rng(3)
    X = rng.random((300, 2))
    K = RBF(lengthscale=true_lengthscale)(X, X) + 1e-8 * np.eye(len(X))
    f = np.linalg.cholesky(K) @ rng.standard_normal(len(X))
    y = f + 0.05 * rng.standard_normal(len(X))
    prior = Prior(lengthscale=median_distance(X, np.random.default_rng(0)))
    inducing = X[:120] if sparse else None
    result = fit(X, y, prior=prior, rng=np.random.default_rng(1), inducing=inducing)
    (lengthscale,) = result.hyperparameters.lengthscale
    assert true_lengthscale / 2 < lengthscale < 2 * true_lengthscale
    assert result.hyperparameters.noise < 0.1 * result.hyperparameters.variance


def test_fit_stays_within_bounds_and_is_deterministic():
    X, y = _data(n=80, d=2)
    prior = Prior(lengthscale=0.5, span=3.0)
    a = fit(X, y, prior=prior, rng=np.random.default_rng(7), ard=True)
    b = fit(X, y, prior=prior, rng=np.random.default_rng(7), ard=True)
    assert a == b
    assert len(a.hyperparameters.lengthscale) == 2
    assert all(0.5 / 3 - 1e-9 <= v <= 0.5 * 3 + 1e-9 for v in a.hyperparameters.lengthscale)


def test_median_distance_of_a_regular_grid():
    X = np.array([[0.0], [1.0], [2.0]])  # pairwise distances 1, 1, 2
    assert median_distance(X, np.random.default_rng(0)) == 1.0
    assert median_distance(np.zeros((5, 2)), np.random.default_rng(0)) == 1.0
