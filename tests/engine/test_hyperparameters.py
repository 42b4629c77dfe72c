"""Kernel hyper-parameter fits: recovery of a known lengthscale, BIC's decisions, bounds."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from service.engine import Strategy
from service.engine.autokernel import ARD_MARGIN, REFIT_TRUST
from service.engine.hyperparameters import (
    INTERVAL_NATS,
    SMOOTHEST_FACTORS,
    Hyperparameters,
    Prior,
    fit,
    smoothest_factor,
    standardised,
)
from service.engine.kernels import RBF
from service.engine.likelihoods import exact_log_likelihood
from service.engine.spacing import median_distance

from .helpers import auto_config, noisy_data, run, smooth_problem


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


@pytest.mark.parametrize("ard", [False, True], ids=["isotropic", "ard"])
@pytest.mark.parametrize("sparse", [False, True], ids=["exact", "titsias"])
def test_the_fits_tolerances_cost_fewer_evaluations_and_no_likelihood(monkeypatch, sparse, ard):
    """FIT_FTOL against scipy's default (2.2e-9) on the same data and
    starts: no more evaluations, the same optimum within 0.05 nats (BIC's thresholds are
    several) and lengthscales within 5%."""
    import service.engine.hyperparameters as module

    rng = np.random.default_rng(4)
    X = rng.random((250, 3))
    K = RBF(lengthscale=0.4)(X, X) + 1e-8 * np.eye(len(X))
    y = np.linalg.cholesky(K) @ rng.standard_normal(len(X)) + 0.05 * rng.standard_normal(250)
    options = {"prior": Prior(lengthscale=0.7), "inducing": X[:90] if sparse else None,
               "ard": ard, "restarts": 2}
    engine = fit(X, y, rng=np.random.default_rng(1), **options)
    monkeypatch.setattr(module, "FIT_FTOL", 2.220446049250313e-09)
    tight = fit(X, y, rng=np.random.default_rng(1), **options)
    assert engine.evaluations <= tight.evaluations
    assert engine.objective == pytest.approx(tight.objective, abs=0.05)
    np.testing.assert_allclose(engine.hyperparameters.lengthscale,
                               tight.hyperparameters.lengthscale, rtol=0.05)


def test_white_noise_is_not_significant_and_a_smooth_function_is():
    rng = np.random.default_rng(5)
    X = rng.random((40, 3))
    prior = Prior(lengthscale=median_distance(X, rng))
    noise = fit(X, rng.standard_normal(40), prior=prior, rng=np.random.default_rng(0))
    smooth = fit(X, np.sin(4.0 * X[:, 0]) + 0.01 * rng.standard_normal(40), prior=prior,
                 rng=np.random.default_rng(0))
    assert not noise.significant and noise.evidence < 3.0 and noise.gain is not None
    assert smooth.significant and smooth.evidence > 30.0 and smooth.gain is None


@pytest.mark.parametrize("value", [0.0, 1.03, -10.0])
def test_constant_values_are_no_evidence_for_any_kernel(value):
    """A plateau (e.g. a failure code reported as a value) was standardised to zeros, or to
    +-1 of rounding, and scored ~200 nats over white noise: the first refit was kept at the
    prior's longest lengthscale and UCB pulled one arm for the rest of the run."""
    X = np.random.default_rng(0).standard_normal((30, 3))
    y = np.full(30, value)
    ys, scale = standardised(y)
    assert not ys.any() and scale == 1.0
    prior = Prior(2.449)
    incumbent = Hyperparameters((2.0, 3.0, 4.0), 0.5, 0.05)
    for start in (None, incumbent):
        result = fit(X, y, prior=prior, rng=np.random.default_rng(1), start=start, ard=True,
                     trust=REFIT_TRUST)
        assert not result.significant and result.evidence == 0.0 and result.gain == 0.0
        assert result.evaluations == 0
        assert result.hyperparameters == (start or Hyperparameters.from_theta(prior.centre(1)))


def test_values_spread_over_1e_162_fit_as_their_multiples_and_restore():
    """np.std of such values is 0 (their squares underflow), so they were fit as constants;
    and variances of 1e-324 underflowed to a stored noise of 0.0, which no restore accepted
    (a 422 on every ask and result of the study, for good)."""
    X, y = noisy_data()
    prior = Prior(lengthscale=median_distance(X, np.random.default_rng(0)))
    unit, tiny = (fit(X, c * y, prior=prior, rng=np.random.default_rng(0)) for c in (1, 3e-162))
    assert tiny.significant and tiny.evaluations == unit.evaluations
    np.testing.assert_allclose(tiny.hyperparameters.lengthscale,
                               unit.hyperparameters.lengthscale, rtol=1e-6)
    assert 0.0 < tiny.hyperparameters.noise <= tiny.hyperparameters.variance < 1e-300
    Xs, f = smooth_problem(n=300, d=3, seed=4)
    engine = Strategy(Xs, auto_config(seed=2))
    run(engine, 3e-162 * f, 150, np.random.default_rng(0), noise=0.0)
    assert engine.hyperparameters.source == "fit"
    restored = Strategy.restore(Xs, engine.config, engine.state())
    assert restored.replay_mismatches == 0 and restored.hyperparameters == engine.hyperparameters


def test_a_fit_beating_the_incumbent_but_not_white_noise_is_significant():
    """A too-long incumbent (the median heuristic's 3 on a function varying over ~0.3) is
    contradicted by 30 noisy points that do not beat white noise by BIC; the gain matches a
    brute-force profile over (s2, noise)."""
    rng = np.random.default_rng(3)
    X = rng.random((30, 2))
    y = np.sin(6.0 * X[:, 0]) + rng.standard_normal(30)
    prior = Prior(lengthscale=3.0)
    result = fit(X, y, prior=prior, rng=np.random.default_rng(0))
    ys = (y - y.mean()) / y.std()
    theta = result.hyperparameters.theta
    theta[-2:] -= 2.0 * np.log(y.std())
    fitted = exact_log_likelihood(theta, X, ys)[0]
    (s2_low, s2_high), (noise_low, noise_high) = prior.bounds(1)[1:]
    kept = max(exact_log_likelihood(np.array([np.log(3.0), a, b]), X, ys)[0]
               for a in np.linspace(s2_low, s2_high, 80)
               for b in np.linspace(noise_low, noise_high, 80))
    assert result.evidence < np.log(30)  # BIC against white noise: (q + 1)/2 log n
    assert result.gain == pytest.approx(fitted - kept, abs=0.05)
    assert result.gain > 0.5 * np.log(30) and result.significant
    assert result.hyperparameters.lengthscale[0] < 1.0


def _starts_of_every_minimize(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of each L-BFGS-B run's start, as the fits go (q + 2 for a fit with q
    lengthscales, 2 for a profile over s2 and noise)."""
    sizes: list[int] = []
    minimize = optimize.minimize

    def counted(fun, x0, *args, **kwargs):  # type: ignore[no-untyped-def]
        sizes.append(len(x0))
        return minimize(fun, x0, *args, **kwargs)

    monkeypatch.setattr(optimize, "minimize", counted)
    return sizes


@pytest.mark.parametrize("ard", [False, True], ids=["isotropic", "ard"])
def test_the_gain_skips_the_profile_only_where_it_could_not_pass_bic(monkeypatch, ard):
    """On white noise the likelihood at the profile's starting points (the fit's and the
    incumbent's s2 and noise at the incumbent's lengthscale) already leaves the fit within
    BIC's price: no 2-parameter profile runs (nor one for an ARD fit not chosen), the fit is
    not significant, and the gain given bounds the profile's from above."""
    import service.engine.hyperparameters as module

    rng = np.random.default_rng(8)
    X, y = rng.random((60, 3)), rng.standard_normal(60)
    prior, start = Prior(lengthscale=0.8), Hyperparameters((0.5,), 1.0, 1.0)
    sizes = _starts_of_every_minimize(monkeypatch)
    result = fit(X, y, prior=prior, rng=np.random.default_rng(0), start=start, trust=2.0,
                 ard=ard)
    assert 2 not in sizes and not result.significant
    assert len(result.hyperparameters.lengthscale) == 1 and result.gain is not None
    ys = (y - y.mean()) / y.std()
    theta = result.hyperparameters.theta
    theta[-2:] -= 2.0 * np.log(y.std())
    incumbent = np.log([0.5, 1.0 / y.var(), 1.0 / y.var()])
    kept = module._profile(lambda t: exact_log_likelihood(t, X, ys), incumbent[:1],
                           [theta[1:], incumbent[1:]], prior.bounds(1)[1:], 60)[0]
    assert result.gain >= exact_log_likelihood(theta, X, ys)[0] - kept - 1e-9


def test_an_incumbent_without_a_finite_likelihood_is_no_evidence(monkeypatch):
    """Where the likelihood fails (non-finite) at the incumbent's lengthscale whatever s2 and
    noise, the gain is 0, not infinite: such a failure does not make a fit significant, and
    smoothest_factor, whose reference profile fails the same way, gives 1."""
    import service.engine.hyperparameters as module

    rng = np.random.default_rng(8)
    X, y = rng.random((60, 3)), rng.standard_normal(60)
    likelihood = module._likelihood

    def failing(X, ys, kernel, inducing):  # type: ignore[no-untyped-def]
        real = likelihood(X, ys, kernel, inducing)
        return lambda theta: ((-np.inf, np.zeros(len(theta)))
                              if abs(theta[0] - np.log(0.8)) < 1e-9 else real(theta))

    monkeypatch.setattr(module, "_likelihood", failing)
    prior = Prior(lengthscale=0.8)  # the incumbent without a start: the prior's centre
    result = fit(X, y, prior=prior, rng=np.random.default_rng(0), restarts=2)
    assert np.isfinite(result.evidence) and result.hyperparameters.lengthscale[0] != 0.8
    assert result.gain == 0.0 and not result.significant
    assert module.smoothest_factor(X, y, Hyperparameters((0.8,), 1.0, 1.0), prior=prior) == 1.0


def test_fit_stays_within_bounds_and_is_deterministic():
    X, y = noisy_data(n=80, d=2)
    prior = Prior(lengthscale=0.5, span=3.0)
    a = fit(X, y, prior=prior, rng=np.random.default_rng(7), ard=True)
    b = fit(X, y, prior=prior, rng=np.random.default_rng(7), ard=True)
    assert a == b
    assert len(a.hyperparameters.lengthscale) == 2
    assert all(0.5 / 3 - 1e-9 <= v <= 0.5 * 3 + 1e-9 for v in a.hyperparameters.lengthscale)


@pytest.mark.parametrize("ard", [False, True], ids=["isotropic", "ard"])
def test_a_trust_region_keeps_each_lengthscale_within_a_factor_of_the_start(ard):
    """Data from a GP with lengthscale 0.15, an incumbent at 1.2: the free fit goes to the data's
    lengthscale; with trust 2 the fit stops at the region's edge, 0.6 (ARD: in each dimension,
    the isotropic start broadcast)."""
    rng = np.random.default_rng(3)
    X = rng.random((150, 2))
    K = RBF(lengthscale=0.15)(X, X) + 1e-8 * np.eye(len(X))
    y = np.linalg.cholesky(K) @ rng.standard_normal(len(X)) + 0.05 * rng.standard_normal(len(X))
    prior = Prior(lengthscale=0.5)
    start = Hyperparameters((1.2,), 1.0, 0.01)
    free = fit(X, y, prior=prior, rng=np.random.default_rng(0), start=start, ard=ard)
    held = fit(X, y, prior=prior, rng=np.random.default_rng(0), start=start, trust=2.0, ard=ard)
    assert max(free.hyperparameters.lengthscale) < 0.3
    assert held.hyperparameters.lengthscale == pytest.approx(
        (0.6,) * len(held.hyperparameters.lengthscale), rel=1e-6)
    assert held.objective < free.objective


def test_ard_keeps_one_lengthscale_unless_bic_prefers_one_per_dimension():
    rng = np.random.default_rng(2)
    X = rng.random((80, 3))
    prior = Prior(lengthscale=median_distance(X, np.random.default_rng(0)))
    K = RBF(lengthscale=0.5)(X, X) + 1e-8 * np.eye(len(X))
    isotropic = np.linalg.cholesky(K) @ rng.standard_normal(len(X))
    axis = np.sin(6.0 * X[:, 0])  # x1 and x2 are irrelevant
    noise = 0.05 * rng.standard_normal(len(X))
    one = fit(X, isotropic + noise, prior=prior, rng=np.random.default_rng(0), ard=True)
    per_dim = fit(X, axis + noise, prior=prior, rng=np.random.default_rng(0), ard=True)
    assert len(one.hyperparameters.lengthscale) == 1
    first, *others = per_dim.hyperparameters.lengthscale
    assert len(others) == 2 and first < min(others) / 3
    margin = fit(X, axis + noise, prior=prior, rng=np.random.default_rng(0), ard=True,
                 ard_margin=ARD_MARGIN)
    assert margin.hyperparameters == per_dim.hyperparameters  # ignored inputs: far above it


def test_the_ard_fit_starts_from_the_isotropic_optimum_only(monkeypatch):
    """The one-lengthscale fit runs from the prior's centre and its restarts; the ARD fit
    beside it only from where that one ended (the prior's starts doubled to quintupled a
    refit's time), and still finds the inputs the values ignore."""
    rng = np.random.default_rng(2)
    X = rng.random((80, 3))
    y = np.sin(6.0 * X[:, 0]) + 0.05 * rng.standard_normal(80)
    starts = _starts_of_every_minimize(monkeypatch)
    result = fit(X, y, prior=Prior(lengthscale=1.0), rng=np.random.default_rng(0), ard=True,
                 restarts=2)
    assert starts == [3, 3, 3, 5]  # isotropic: 1 + 2 lengthscale-s2-noise; ARD: 3 + 2, once
    first, *others = result.hyperparameters.lengthscale
    assert len(others) == 2 and first < min(others) / 3


def test_the_ard_margin_keeps_one_lengthscale_for_a_mild_anisotropy():
    """Lengthscales 0.25 and 0.5: BIC alone prefers two, ARD_MARGIN times its price does not
    (ard "auto", the engine's default, is for inputs the values ignore)."""
    rng = np.random.default_rng(0)
    X = rng.random((60, 2))
    Xs = X / np.array([0.25, 0.5])
    K = RBF(lengthscale=1.0)(Xs, Xs) + 1e-8 * np.eye(len(X))
    y = np.linalg.cholesky(K) @ rng.standard_normal(len(X)) + 0.05 * rng.standard_normal(60)
    prior = Prior(lengthscale=median_distance(X, np.random.default_rng(0)))
    bic = fit(X, y, prior=prior, rng=np.random.default_rng(0), ard=True)
    held = fit(X, y, prior=prior, rng=np.random.default_rng(0), ard=True, ard_margin=ARD_MARGIN)
    assert len(bic.hyperparameters.lengthscale) == 2
    assert len(held.hyperparameters.lengthscale) == 1


def test_the_smoothest_factor_is_the_upper_end_of_the_likelihood_interval():
    """smoothest_factor returns the largest factor of the grid whose profile likelihood
    (max over s2, noise) stays within INTERVAL_NATS of the best one seen from the fit's up,
    checked against profiles computed here by brute force (a 2-d optimisation at each
    factor); on more data the interval narrows."""
    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, size=(160, 2))
    K = RBF(lengthscale=1.0)(X, X) + 1e-8 * np.eye(len(X))
    y = np.linalg.cholesky(K) @ rng.standard_normal(len(X)) + 0.1 * rng.standard_normal(len(X))
    prior = Prior(1.0)

    def profile(ell: float, Xn: np.ndarray, yn: np.ndarray) -> float:
        ys = (yn - yn.mean()) / yn.std()
        result = optimize.minimize(
            lambda nu: -exact_log_likelihood(np.r_[np.log(ell), nu], Xn, ys)[0],
            np.zeros(2), method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-8})
        return -float(result.fun)

    factors = []
    for n in (40, 160):
        fitted = fit(X[:n], y[:n], prior=prior, rng=np.random.default_rng(0)).hyperparameters
        ell = fitted.lengthscale[0]
        factor = smoothest_factor(X[:n], y[:n], fitted, prior=prior)
        assert factor == 1.0 or factor in SMOOTHEST_FACTORS
        top = profile(ell, X[:n], y[:n])
        for c in (c for c in SMOOTHEST_FACTORS if c <= factor):
            value = profile(c * ell, X[:n], y[:n])
            assert value >= top - INTERVAL_NATS - 1e-3
            top = max(top, value)
        larger = [c for c in SMOOTHEST_FACTORS if c > factor]
        if larger:
            assert profile(larger[0] * ell, X[:n], y[:n]) < top - INTERVAL_NATS + 1e-3
        factors.append(factor)
    assert factors[1] <= factors[0]
