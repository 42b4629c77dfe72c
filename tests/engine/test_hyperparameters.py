"""Kernel hyper-parameters: likelihood gradients, recovery of a known lengthscale, engine use."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy import optimize

from service.engine import ConfigError, EngineConfig, Strategy
from service.engine.hyperparameters import (
    ARD_MARGIN,
    FLOOR_START_RATIO,
    INTERVAL_NATS,
    LAM_FLOOR,
    NEIGHBOUR_CORRELATION,
    REFIT_GROWTH,
    REFIT_MIN_ARMS,
    REFIT_MIN_OBSERVATIONS,
    REFIT_TRUST,
    SMOOTHEST_FACTORS,
    SMOOTHING,
    Hyperparameters,
    KernelState,
    Prior,
    exact_log_likelihood,
    fit,
    fitted_lam,
    median_distance,
    neighbour_lengthscale,
    rms_distance,
    smoothest_factor,
    sparse_log_likelihood,
    squared_distances,
    standardised,
)
from service.engine.kernels import RBF, Matern52
from service.engine.normalize import choose_scaling
from service.engine.records import OBSERVED
from service.problems import function_problem

from .helpers import run, smooth_problem


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
    once = exact_log_likelihood(theta, X, y, kernel, squared_distances(X))  # a fit's shortcut
    np.testing.assert_array_equal(once[1], exact_log_likelihood(theta, X, y, kernel)[1])


def test_titsias_bound_equals_exact_with_every_point_inducing_and_is_below_otherwise():
    X, y = _data(n=40)
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


def test_a_plateau_of_equal_values_leaves_the_automatic_kernel_at_its_start():
    """The runs the plateau used to lock on the prior's longest lengthscale: their best value
    after it was 0.12-0.48 on these seeds, now 0.92-0.995."""
    X = np.random.default_rng(0).random((300, 3))
    f = -np.sum((X - 0.5) ** 2, axis=1) + np.sin(3.0 * X[:, 0])
    f = (f - f.min()) / np.ptp(f)
    for seed in range(4):
        engine = Strategy(X, _auto_config(seed=seed))
        arms = []
        while engine.t < 200:
            for selection in engine.ask_batch():
                engine.tell(selection.t, 0.4 if selection.t < 30 else float(f[selection.arm]))
                arms.append(selection.arm)
        on_plateau = [b.hyperparameters for b in engine.batches
                      if b.hyperparameters and 0 < b.hyperparameters["fitted_at"] <= 30]
        assert on_plateau and all(h["source"] == "start" for h in on_plateau)
        assert max(f[arms[30:]]) > 0.9


def test_values_spread_over_1e_162_fit_as_their_multiples_and_restore():
    """np.std of such values is 0 (their squares underflow), so they were fit as constants;
    and variances of 1e-324 underflowed to a stored noise of 0.0, which no restore accepted
    (a 422 on every ask and result of the study, for good)."""
    X, y = _data()
    prior = Prior(lengthscale=median_distance(X, np.random.default_rng(0)))
    unit, tiny = (fit(X, c * y, prior=prior, rng=np.random.default_rng(0)) for c in (1, 3e-162))
    assert tiny.significant and tiny.evaluations == unit.evaluations
    np.testing.assert_allclose(tiny.hyperparameters.lengthscale,
                               unit.hyperparameters.lengthscale, rtol=1e-6)
    assert 0.0 < tiny.hyperparameters.noise <= tiny.hyperparameters.variance < 1e-300
    Xs, f = smooth_problem(n=300, d=3, seed=4)
    engine = Strategy(Xs, _auto_config(seed=2))
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
    X, y = _data(n=80, d=2)
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


def test_median_distance_of_a_regular_grid():
    X = np.array([[0.0], [1.0], [2.0]])  # pairwise distances 1, 1, 2
    assert median_distance(X, np.random.default_rng(0)) == 1.0
    assert median_distance(np.zeros((5, 2)), np.random.default_rng(0)) == 1.0


# ---------------------------------------------------------------------------- in the engine
def test_the_default_gives_inputs_the_values_ignore_their_own_long_lengthscale():
    """ard "auto" (the default): x2..x5 do not move the values, and the kernel ends with one
    lengthscale per input, the ignored ones 10x longer; ard False keeps one for all."""
    rng = np.random.default_rng(0)
    X = rng.random((400, 6))
    f = np.exp(-((X[:, 0] - 0.6) ** 2 + (X[:, 1] - 0.3) ** 2) / 0.05)
    config = dict(strategy="bbkb", mode="sync", seed=0, explore=1.0)
    assert EngineConfig(**config).ard == "auto"
    lengthscales = {}
    for ard in ("auto", False):
        strategy = Strategy(X, **config, ard=ard)
        run(strategy, f, 400, np.random.default_rng(0))
        lengthscales[ard] = strategy.hyperparameters.lengthscale
    assert len(lengthscales["auto"]) == 6
    assert 10 * max(lengthscales["auto"][:2]) < min(lengthscales["auto"][2:])
    assert len(lengthscales[False]) == 1
    assert EngineConfig(strategy="gssbo", ard=False).ard is False  # stored before "auto"


def _auto_config(**overrides) -> EngineConfig:
    return EngineConfig(**({"lam": 0.5, "seed": 5, "mode": "sync"} | overrides))


@pytest.mark.parametrize("overrides", [{}, {"ard": True}, {"strategy": "gp-bucb"},
                                       {"strategy": "gp-ucb"}, {"strategy": "bkb"},
                                       {"kernel": {"name": "matern52"}, "mode": "async"}],
                         ids=["bbkb", "ard", "gp-bucb", "gp-ucb", "bkb", "matern-async"])
def test_refits_happen_only_at_batch_openings_and_restore_installs_them(overrides):
    X, f = smooth_problem(n=300, d=2, seed=4)
    X = 10.0 * X + 3.0  # normalisation makes the default independent of units
    cfg = _auto_config(**overrides)
    live = Strategy(X, cfg)
    rng = np.random.default_rng(0)
    seen: dict[int, object] = {}
    for _ in range(40):
        for _ in range(7):  # one at a time: live.hyperparameters are those of sel.batch
            (sel,) = live.ask(1)
            assert seen.setdefault(sel.batch, live.hyperparameters) is live.hyperparameters
            live.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
        restored = Strategy.restore(X, cfg, live.state())
        assert restored.hyperparameters == live.hyperparameters
        assert restored.replay_mismatches == 0
    fitted = {info.hyperparameters["fitted_at"] for info in live.batches}
    assert len(fitted) >= 3  # the schedule refit several times, at openings only
    for info in live.batches:  # lam: the fit's noise / signal variance, within its bounds
        h = info.hyperparameters
        expected = cfg.lam if h["variance"] is None else min(
            cfg.lam, max(LAM_FLOOR * cfg.lam, h["noise"] / h["variance"]))
        assert h["lam"] == pytest.approx(expected, rel=1e-12)
    assert any(info.hyperparameters["lam"] < cfg.lam for info in live.batches)
    assert all(b.hyperparameters == seen[b.index].to_dict() for b in live.batches)
    # from a restore, the same proposals as the live strategy
    restored = Strategy.restore(X, cfg, live.state())
    for strategy in (live, restored):
        noise = np.random.default_rng(9)
        out = []
        for _ in range(5):
            batch = strategy.ask(5)
            out.append([(s.t, s.arm) for s in batch])
            for sel in batch:
                strategy.tell(sel.t, f[sel.arm] + 0.01 * noise.standard_normal())
        if strategy is live:
            expected = out
    assert out == expected
    assert restored.hyperparameters == live.hyperparameters


def test_the_kernel_runs_on_the_kept_fits_lengthscale_times_smoothing(monkeypatch):
    """Each kept fit sets the kernel to SMOOTHING x its lengthscales (ARD: each of them), the
    next fit starts from the fit's own values, not the smoothed ones, and moves them by at most
    a factor REFIT_TRUST."""
    import service.engine.strategy as strategy_module

    calls: list[tuple[object, object]] = []

    def recording_fit(*args, **kwargs):  # the real fit; records its start and its result
        result = fit(*args, **kwargs)
        assert kwargs["trust"] == (None if kwargs["start"] is None else REFIT_TRUST)
        calls.append((kwargs["start"], result))
        return result

    monkeypatch.setattr(strategy_module, "fit", recording_fit)
    X, f = smooth_problem(n=300, d=2, seed=4)
    strategy = Strategy(X, _auto_config(ard=True))
    run(strategy, f, 250, np.random.default_rng(0))
    kept = [result for _, result in calls if result.significant]
    assert len(kept) >= 2
    used = list({b.hyperparameters["fitted_at"]: tuple(b.hyperparameters["lengthscale"])
                 for b in strategy.batches if b.hyperparameters["variance"] is not None}.values())
    assert len(used) >= len(kept)  # one entry per refit after the first kept one
    for result in kept:  # each kept fit ran some batches on SMOOTHING x its lengthscales
        assert any(np.allclose(lengthscale, SMOOTHING * np.array(
            result.hyperparameters.lengthscale), rtol=1e-12) for lengthscale in used)
    sources = [b.hyperparameters["source"] for b in strategy.batches]
    assert sources[0] == "start" and sources[-1] == "fit"
    assert {b.hyperparameters["source"] for b in strategy.batches
            if b.hyperparameters["variance"] is not None} == {"fit"}
    last = None  # the next fit starts from the last kept fit's own lengthscales
    for start, result in calls:
        if last is not None:
            np.testing.assert_allclose(start.lengthscale, last.hyperparameters.lengthscale)
            ratio = np.log(np.divide(result.hyperparameters.lengthscale, start.lengthscale))
            assert np.all(np.abs(ratio) <= np.log(REFIT_TRUST) + 1e-9)
        last = result if result.significant else last


@pytest.mark.parametrize("block", [65536, 7])
def test_neighbour_lengthscale_gives_the_nearest_neighbour_that_correlation(block):
    """On a grid of spacing 0.3 every nearest neighbour is 0.3 away: the RBF at the returned
    lengthscale correlates them at exactly the asked correlation, whatever the blocking; a
    copy of a row is not its neighbour (with each row listed twice the floor was 0)."""
    X = 0.3 * np.arange(50.0)[:, None]
    lengthscale = neighbour_lengthscale(X, 0.5, rows=20, block=block)
    assert np.exp(-0.3**2 / (2.0 * lengthscale**2)) == pytest.approx(0.5)
    assert neighbour_lengthscale(np.repeat(X, 2, axis=0), 0.5, block=block) == pytest.approx(
        lengthscale)
    assert neighbour_lengthscale(np.full((6, 2), 0.7), 0.5, block=block) == 0.0


def test_candidates_listed_twice_have_the_floor_of_those_listed_once():
    """In 20 dimensions the kernel starts on the floor; with every candidate listed twice the
    floor was 0 and the study started on the RMS distance instead (Rastrigin-20: regret
    0.06-0.10 on three of four seeds, against 0 on the candidates listed once)."""
    X = np.random.default_rng(0).standard_normal((400, 20))
    both = np.vstack([X, X])
    once = neighbour_lengthscale(X, NEIGHBOUR_CORRELATION, rows=len(X))
    assert neighbour_lengthscale(both, NEIGHBOUR_CORRELATION, rows=len(both)) == once
    starts = [Strategy(candidates, _auto_config()).hyperparameters for candidates in (X, both)]
    assert [state.source for state in starts] == ["floor", "floor"]
    assert starts[1].lengthscale[0] == pytest.approx(starts[0].lengthscale[0], rel=0.05)


def test_the_neighbour_lengthscale_of_a_matern_kernel_is_its_own_correlation():
    """The floor is the lengthscale of the study's kernel, not the RBF's: Matern-5/2 at the
    returned lengthscale correlates neighbours 0.3 apart at exactly the asked correlation."""
    X = 0.3 * np.arange(50.0)[:, None]
    lengthscale = neighbour_lengthscale(X, 0.7, "matern52")
    k = Matern52(lengthscale=lengthscale)(X[:1], X[1:2])[0, 0]
    assert k == pytest.approx(0.7, rel=1e-9)
    assert lengthscale > neighbour_lengthscale(X, 0.7)  # at the RBF's it correlates them 0.62


@pytest.mark.parametrize("ard", [False, True], ids=["isotropic", "ard"])
def test_a_kept_fit_never_runs_the_kernel_below_the_neighbour_lengthscale(monkeypatch, ard):
    """Every fit kept with a lengthscale 1/10 of the real fit's and a tenth of its noise (a
    stand-in for data with structure below the candidates' spacing): the isotropic kernel runs
    on the floor at which nearest neighbours correlate at NEIGHBOUR_CORRELATION, with the
    configured lam; ARD's on SMOOTHING x the fit, with the fit's lam."""
    import service.engine.strategy as strategy_module

    kept: list[Hyperparameters] = []

    def short_fit(*args, **kwargs):  # the real fit, 10x shorter and less noisy, kept
        result = fit(*args, **kwargs)
        fitted = result.hyperparameters
        short = replace(fitted, lengthscale=tuple(0.1 * v for v in fitted.lengthscale),
                        noise=0.1 * fitted.noise)
        kept.append(short)
        return replace(result, evidence=1e3, hyperparameters=short)

    monkeypatch.setattr(strategy_module, "fit", short_fit)
    # the data reject any lengthscale longer than the fit's (the smoothest path: below)
    monkeypatch.setattr(strategy_module, "smoothest_factor",
                        lambda X, y, fitted, **kwargs: 1.0)
    X, f = smooth_problem(n=300, d=3, seed=2)
    strategy = Strategy(X, _auto_config(ard=ard, explore=1.0))
    run(strategy, f, 120, np.random.default_rng(1))
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    used = list(dict.fromkeys((tuple(h["lengthscale"]), h["lam"]) for h in (
        b.hyperparameters for b in strategy.batches) if h["variance"] is not None))
    assert len(kept) >= 2 and len(used) >= 1
    for h in (b.hyperparameters for b in strategy.batches if b.hyperparameters["variance"]):
        assert h["source"] == ("floor" if len(h["lengthscale"]) == 1 else "fit")
    for (lengthscale, lam), short in zip(used, kept, strict=False):
        if len(short.lengthscale) == 1:
            assert SMOOTHING * short.lengthscale[0] < floor
            assert lengthscale == pytest.approx((floor,)) and lam == strategy.config.lam
        else:
            np.testing.assert_allclose(lengthscale, SMOOTHING * np.array(short.lengthscale))
            assert lam == fitted_lam(short, strategy.config.lam) < strategy.config.lam


def test_a_kept_fit_below_the_floor_runs_on_the_smoothest_factor_the_data_allow(
        monkeypatch):
    """Kept fits 1/3 of the real fit's lengthscale, below the floor: where a lengthscale up to
    4x theirs that reaches the floor is not rejected by the likelihood, the kernel runs on it
    (source "fit", the fit's lam), and the next fit starts from the fit's own lengthscale,
    not from the kernel's over SMOOTHING; a restore after such a batch carries the factor
    (its next refit proposes the same arms as the live run's)."""
    import service.engine.strategy as strategy_module

    kept: list[Hyperparameters] = []
    starts: list[Hyperparameters | None] = []

    def short_fit(*args, **kwargs):
        starts.append(kwargs.get("start"))
        result = fit(*args, **kwargs)
        short = replace(result.hyperparameters, lengthscale=tuple(
            v / 3.0 for v in result.hyperparameters.lengthscale))
        kept.append(short)
        return replace(result, evidence=1e3, hyperparameters=short)

    monkeypatch.setattr(strategy_module, "fit", short_fit)
    X, f = smooth_problem(n=300, d=3, seed=2)
    config = _auto_config(ard=False, explore=1.0)
    strategy = Strategy(X, config)
    run(strategy, f, 100, np.random.default_rng(1))
    restored = Strategy.restore(X, config, strategy.state())
    assert restored.hyperparameters == strategy.hyperparameters
    fitted_before = strategy.hyperparameters.fitted_at
    live_arms = run(strategy, f, 80, np.random.default_rng(2))
    live_fits = len(kept)
    np.testing.assert_array_equal(run(restored, f, 80, np.random.default_rng(2)), live_arms)
    assert strategy.hyperparameters.fitted_at > fitted_before  # a refit after the restore
    assert kept[live_fits:] == kept[live_fits - (len(kept) - live_fits):live_fits]
    del kept[live_fits:], starts[live_fits:]  # the live run's fits only
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    states = list({h["fitted_at"]: h for h in (b.hyperparameters for b in strategy.batches)
                   if h["variance"] is not None}.values())
    assert len(states) == len(kept) >= 2
    smoothed = 0
    for state, short, after in zip(states, kept, starts[1:] + [None], strict=True):
        (lengthscale,) = state["lengthscale"]
        assert lengthscale >= floor * (1 - 1e-12)  # never below the floor
        if SMOOTHING * short.lengthscale[0] >= floor:
            continue  # not below the floor: SMOOTHING x the fit, as before
        if state["source"] == "fit":
            smoothed += 1
            assert state["smoothing"] in SMOOTHEST_FACTORS
            assert lengthscale == pytest.approx(state["smoothing"] * short.lengthscale[0])
            assert state["lam"] == fitted_lam(short, strategy.config.lam)
            if after is not None:  # the next fit starts from the fit, not the kernel
                assert after.lengthscale == pytest.approx(short.lengthscale)
        else:
            assert state["source"] == "floor" and lengthscale == pytest.approx(floor)
    assert smoothed >= 1


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


@pytest.mark.parametrize("first_kept", [False, True])
def test_an_unkept_fit_below_the_neighbour_lengthscale_moves_only_the_start(monkeypatch,
                                                                           first_kept):
    """Fits that BIC does not keep, with a lengthscale 1/10 of the real fit's (white noise on
    the candidates' spacing): before any kept fit the kernel leaves the start for the floor,
    at the configured lam, and stays there; once a fit has been kept, they change nothing."""
    import service.engine.strategy as strategy_module

    calls: list[float] = []

    def unkept_fit(*args, **kwargs):  # the real fit, 10x shorter, not kept (but the first)
        result = fit(*args, **kwargs)
        calls.append(0.1 * result.hyperparameters.lengthscale[0])
        if first_kept and len(calls) == 1:
            return replace(result, evidence=1e3)
        short = replace(result.hyperparameters, lengthscale=(calls[-1],))
        return replace(result, evidence=-1e3, gain=None, hyperparameters=short)

    monkeypatch.setattr(strategy_module, "fit", unkept_fit)
    X, f = smooth_problem(n=300, d=3, seed=2)
    strategy = Strategy(X, _auto_config(explore=1.0))
    start = strategy.hyperparameters.lengthscale[0]
    run(strategy, f, 120, np.random.default_rng(1))
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    states = [b.hyperparameters for b in strategy.batches]
    assert len(calls) >= 3 and all(SMOOTHING * ls < floor for ls in calls[first_kept:])
    if first_kept:
        kept = [h for h in states if h["variance"] is not None]
        assert kept and {tuple(h["lengthscale"]) for h in kept} == {tuple(kept[0]["lengthscale"])}
        assert kept[0]["lengthscale"][0] > floor
        assert {h["source"] for h in kept} == {"fit"}
    else:
        assert {tuple(h["lengthscale"]) for h in states} == {(start,), (floor,)}
        assert tuple(states[-1]["lengthscale"]) == (floor,)
        assert all(h["variance"] is None and h["lam"] == strategy.config.lam for h in states)
        assert {(tuple(h["lengthscale"]), h["source"]) for h in states} == {
            ((start,), "start"), ((floor,), "floor")}


def test_a_restore_installs_the_stored_kernel_without_computing_the_start(monkeypatch):
    """A restore installs the current batch's stored hyper-parameters; the start, and the
    neighbour floor it needs (O(200 A d): 1.9 s at A = 10^6, d = 50), is never computed."""
    import service.engine.strategy as strategy_module

    X, f = smooth_problem(n=300, d=3, seed=2)
    live = Strategy(X, _auto_config())
    run(live, f, 80, np.random.default_rng(0))
    calls: list[int] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return neighbour_lengthscale(*args, **kwargs)

    monkeypatch.setattr(strategy_module, "neighbour_lengthscale", counted)
    restored = Strategy.restore(X, live.config, live.state())
    assert calls == [] and restored.hyperparameters == live.hyperparameters
    assert restored.hyperparameters.source in ("floor", "fit")  # not the start
    assert [restored.ask()[0].arm for _ in range(3)] == [live.ask()[0].arm for _ in range(3)]
    before = len(calls)  # (a refit in those asks may have needed the floor)
    Strategy(X, live.config)  # a new strategy needs the start
    assert len(calls) == before + 1


def test_default_lengthscale_is_the_rms_distance_of_normalised_candidates():
    X, _ = smooth_problem(n=200, d=3, seed=1)
    X[:, 2] = X[:, 2] ** 3  # a skewed column: unit scaling then differs from sqrt(2 d)
    a = Strategy(X, EngineConfig())
    b = Strategy(100.0 * X - 7.0, EngineConfig())  # same candidates in other units
    (lengthscale,) = a.hyperparameters.lengthscale
    assert b.hyperparameters.lengthscale[0] == pytest.approx(lengthscale, rel=1e-12)
    for normalize, Z in [("zscore", (X - X.mean(0)) / X.std(0)),
                         ("unit", (X - X.min(0)) / np.ptp(X, axis=0))]:
        squared = ((Z[:, None] - Z[None]) ** 2).sum(-1)  # both rows drawn independently
        (start,) = Strategy(X, EngineConfig(normalize=normalize)).hyperparameters.lengthscale
        assert start == pytest.approx(np.sqrt(squared.mean()), rel=1e-10)
    assert lengthscale == pytest.approx(np.sqrt(6.0))  # sqrt(2 d) once z-scored
    assert a.hyperparameters.fitted_at == 0 and a.hyperparameters.variance is None
    assert a.hyperparameters.source == "start"  # 3-d: far from FLOOR_START_RATIO
    assert rms_distance(np.ones((4, 2))) == 1.0


@pytest.mark.parametrize("normalize", ["zscore", "unit"])
def test_a_column_constant_but_for_rounding_is_left_constant(normalize):
    """0.3 and 0.1 + 0.2 differ in the last bit: scaled by that spread, the column became
    +-1, a dimension as long as any real one."""
    X, _ = smooth_problem(n=40, d=2, seed=3)
    X = np.c_[X, np.where(np.arange(40) % 2, 0.3, 0.1 + 0.2)]
    scaling = choose_scaling(X, normalize)
    assert scaling.scale[2] == 1.0 and np.ptp(scaling.apply(X)[:, 2]) < 1e-15
    assert np.all(scaling.scale[:2] != 1.0)


@pytest.mark.parametrize("n_arms", [300, 12])
def test_before_the_first_fit_each_batch_brings_new_arms(n_arms):
    """Near-greedy UCB (explore 1e-3) pulls its best early arm again and again and would never
    collect the REFIT_MIN_ARMS distinct arms a fit needs. With automatic hyper-parameters each
    batch opened before the first fit proposes no arm proposed before it and closes at its first
    repeat, until there are that many arms (or every candidate has been proposed); the fit
    follows at the next opening."""
    X, f = smooth_problem(n=n_arms, d=2, seed=3)
    auto = Strategy(X, _auto_config(explore=1e-3))
    run(auto, f, 100, np.random.default_rng(0))
    arms, batches = auto.records["arm"], auto.records["batch"]
    phase = [info for info in auto.batches if info.index > 0
             and len(np.unique(arms[batches < info.index])) < min(REFIT_MIN_ARMS, n_arms)]
    assert 0 < len(phase) < min(REFIT_MIN_ARMS, n_arms)
    for info in phase:
        batch = arms[batches == info.index]
        assert not np.isin(batch, arms[batches < info.index]).any()
        new = len(np.unique(batch))
        assert new == len(batch) - (info.stop_reason == "repeat") >= 1
        assert info.hyperparameters["fitted_at"] == 0
    seen = np.count_nonzero(batches <= phase[-1].index)  # steps until the phase ended
    assert len(np.unique(arms[:seen])) >= min(REFIT_MIN_ARMS, n_arms)
    if n_arms > REFIT_MIN_ARMS:  # the fit comes at the first opening after them
        assert auto.batches[phase[-1].index + 1].hyperparameters["fitted_at"] == seen
    # the same near-greedy UCB on the start's lengthscale, fixed: it keeps repeating itself
    (start,) = auto.batches[0].hyperparameters["lengthscale"]
    fixed = Strategy(X, _auto_config(explore=1e-3, normalize="zscore",
                                     kernel={"name": "rbf", "lengthscale": start}))
    fixed_arms = run(fixed, f, 100, np.random.default_rng(0))
    assert len(np.unique(fixed_arms)) < min(REFIT_MIN_ARMS, n_arms)


def test_fixed_hyperparameters_never_change():
    X, f = smooth_problem(n=150)
    strategy = Strategy(X, EngineConfig(kernel={"name": "rbf", "lengthscale": 0.3}))
    assert strategy.config.hyperparameters == "fixed" and strategy.config.normalize == "none"
    run(strategy, f, 120, np.random.default_rng(0))
    assert {tuple(b.hyperparameters["lengthscale"]) for b in strategy.batches} == {(0.3,)}
    assert {b.hyperparameters["source"] for b in strategy.batches} == {"fixed"}


@pytest.mark.parametrize("strategy", ["bbkb", "gp-ucb"])
def test_a_fixed_lengthscale_per_dimension_equals_one_on_rescaled_columns(strategy):
    """Fixing l_j per column is the one-lengthscale kernel (l = 1) on x_j / l_j: the same
    proposals, step for step, and every batch records the d lengthscales as fixed."""
    X, f = smooth_problem(n=200, d=3)
    ell = np.array([0.2, 0.5, 8.0])
    per_dim = Strategy(X, strategy=strategy, kernel={"name": "rbf", "lengthscale": ell.tolist()})
    rescaled = Strategy(X / ell, strategy=strategy, kernel={"name": "rbf", "lengthscale": 1.0})
    arms = run(per_dim, f, 80, np.random.default_rng(0))
    np.testing.assert_array_equal(arms, run(rescaled, f, 80, np.random.default_rng(0)))
    assert len(np.unique(arms)) > 10
    assert {tuple(b.hyperparameters["lengthscale"]) for b in per_dim.batches} == {tuple(ell)}
    assert {b.hyperparameters["source"] for b in per_dim.batches} == {"fixed"}


def test_a_lengthscale_list_must_match_the_columns():
    X, _ = smooth_problem(n=50, d=3)
    with pytest.raises(ConfigError, match="2 values for candidates of 3 columns") as info:
        Strategy(X, kernel={"name": "matern52", "lengthscale": [1.0, 2.0]})
    assert info.value.field == "kernel.lengthscale"
    assert Strategy(X, kernel={"name": "matern52", "lengthscale": [2.0]}).ask(1)
    # under "auto" a Kernel object's lengthscale is unused, whatever its length
    auto = Strategy(X, kernel=RBF(lengthscale=(1.0, 2.0)), hyperparameters="auto")
    assert auto.ask(1) and auto.hyperparameters.source in {"start", "floor"}


def test_kernel_states_round_trip_and_older_ones_have_no_source():
    state = KernelState((1.5, 2.0), 0.3, 0.02, 0.001, 40, "fit", 2.5)
    assert KernelState.from_dict(state.to_dict()) == state
    assert state.fitted_lengthscale == pytest.approx((0.6, 0.8))
    older = {k: v for k, v in state.to_dict().items()  # stored before source and smoothing
             if k not in ("source", "smoothing")}
    assert KernelState.from_dict(older) == replace(state, source=None, smoothing=SMOOTHING)
    linear = KernelState((), 0.3, source="fixed")  # a linear kernel has no lengthscale
    assert KernelState.from_dict(linear.to_dict()) == linear
    unfitted = KernelState((1.5,), 0.3, source="start")  # no kept fit: no smoothing
    assert unfitted.smoothing is None and KernelState.from_dict(unfitted.to_dict()) == unfitted
    older = {k: v for k, v in unfitted.to_dict().items() if k != "smoothing"}
    assert KernelState.from_dict(older) == unfitted
    for bad in ({"source": "guess"}, {"smoothing": 0.0}, {"smoothing": "x"},
                {"smoothing": float("nan")}, {"lengthscale": [1.5, -2.0]},
                {"lengthscale": [float("inf")]}, {"lam": 0.0}, {"lam": None},
                {"variance": -1.0}, {"noise": float("nan")}):
        with pytest.raises(ConfigError) as info:
            KernelState.from_dict(state.to_dict() | bad)
        assert info.value.field == "hyperparameters"


@pytest.mark.parametrize("config, field", [
    ({"hyperparameters": "auto", "kernel": {"name": "linear"}}, "hyperparameters"),
    ({"hyperparameters": "auto", "kernel": {"name": "rbf", "lengthscale": 2.0}},
     "kernel.lengthscale"),
    ({"ard": True, "kernel": {"name": "rbf", "lengthscale": 2.0}}, "ard"),
    ({"ard": "yes"}, "ard"),
    ({"ard": 1}, "ard"),
    ({"normalize": "minmax"}, "normalize"),
    ({"hyperparameters": "sometimes"}, "hyperparameters"),
    # a fixed kernel without its lengthscale ran on the kernel class's 1.0, in raw units
    ({"hyperparameters": "fixed"}, "kernel.lengthscale"),
    ({"hyperparameters": "fixed", "kernel": {"name": "rbf", "lengthscale": "auto"}},
     "kernel.lengthscale"),
])
def test_bad_hyperparameter_options_name_their_field(config, field):
    with pytest.raises(ConfigError) as info:
        EngineConfig(**config)
    assert info.value.field == field


def test_config_round_trip_keeps_the_resolved_options():
    for config in [{}, {"kernel": {"name": "rbf", "lengthscale": "auto"}, "normalize": "unit"},
                   {"kernel": {"name": "rbf", "lengthscale": 2.0}},
                   {"kernel": {"name": "rbf", "lengthscale": [2.0, 0.5]}, "normalize": "zscore"}]:
        cfg = EngineConfig(**config)
        assert EngineConfig.from_dict(cfg.to_dict()) == cfg


def test_on_sparse_candidates_the_kernel_starts_on_the_floor_which_the_exact_fits_confirm(
        monkeypatch):
    """Levy-20 on 2000 candidates: the RMS distance (sqrt(2 d) = 6.3) is far too long and the
    neighbour floor exceeds half of it, so the isotropic kernel starts on the floor
    (FLOOR_START_RATIO; ARD too). Until a fit is kept the fits use the exact
    likelihood (Titsias' bound with a dictionary drawn at 6.3 cannot express short
    lengthscales: BBKB's refits were rejected and it kept 6.3 to T = 1000, regret ratio 0.7
    against GP-BUCB's 0.18), and they put the lengthscale below the floor, where it stays."""
    import service.engine.strategy as strategy_module

    calls: list[tuple[bool, float]] = []  # (exact likelihood, fitted lengthscale): a spy

    def spy(*args, **kwargs):
        result = fit(*args, **kwargs)
        calls.append((kwargs["inducing"] is None, result.hyperparameters.lengthscale[0]))
        return result

    monkeypatch.setattr(strategy_module, "fit", spy)
    raw = function_problem("levy", dim=20, n_candidates=2000, noise_sd=0.01, seed=0)
    f = (raw.values - raw.values.min()) / np.ptp(raw.values)
    config = dict(strategy="bbkb", mode="sync", seed=0, explore=0.1, oversampling=2.0)
    strategy = Strategy(raw.candidates, **config)
    rms = rms_distance(strategy._normalized)
    floor = neighbour_lengthscale(strategy._normalized, NEIGHBOUR_CORRELATION)
    assert FLOOR_START_RATIO * rms < floor < 0.7 * rms
    assert strategy.hyperparameters == KernelState((floor,), 1.0, source="floor")
    ard = Strategy(raw.candidates, **config, ard=True).hyperparameters
    assert ard.lengthscale == (floor,) and ard.source == "floor"
    matern = Strategy(raw.candidates, **config, kernel={"name": "matern52"}).hyperparameters
    assert matern.lengthscale == (neighbour_lengthscale(strategy._normalized,
                                                        NEIGHBOUR_CORRELATION, "matern52"),)
    assert matern.source == "floor" and matern.lengthscale[0] > floor  # its own kernel's
    run(strategy, f, 200, np.random.default_rng(0))
    assert calls and calls[0][0] and SMOOTHING * calls[0][1] < floor
    assert strategy.hyperparameters.lengthscale[0] == pytest.approx(floor)


@pytest.mark.parametrize("overrides", [{}, {"kernel": {"name": "rbf", "lengthscale": 0.2}},
                                       {"strategy": "gp-bucb"}, {"strategy": "thompson"}],
                         ids=["auto", "fixed", "gp-bucb", "thompson"])
def test_proposals_do_not_depend_on_the_offset_of_values_below_zero(overrides):
    """normalize_values "unit" (the default) shifts values below 0 up (to -3 xi) and maps values
    spanning more than 1 onto [0, 1], so shifting negative values changes no proposal. Values
    on a grid of 2^-10, a factor 8 and whole shifts keep every operation exact, so the runs
    agree arm for arm, refits included. Values already in [0, 1] are left alone (the run is
    that of "none"), and under "none" the moved values change the proposals (noise,
    rkhs_bound and the prior mean 0 are then in the values' units)."""
    X, f = smooth_problem(n=300, d=2, seed=2)
    f = np.round(f * 1024.0) / 1024.0
    assert 0.0 <= f.min() and f.max() <= 1.0
    arms = {}
    for label, transform, config in [
            ("unit", lambda v: v, {}),
            ("unit as given", lambda v: v, {"normalize_values": "none"}),
            ("moved", lambda v: 8.0 * v - 100.0, {}),
            ("moved again", lambda v: 8.0 * v - 36.0, {}),
            ("moved as given", lambda v: 8.0 * v - 100.0, {"normalize_values": "none"})]:
        strategy = Strategy(X, _auto_config(**overrides, **config))
        arms[label] = run(strategy, transform(f), 150, np.random.default_rng(0), noise=0.0)
        if label == "moved" and not overrides:
            assert strategy.hyperparameters.fitted_at > 0  # a fit was part of the run
    np.testing.assert_array_equal(arms["unit as given"], arms["unit"])
    np.testing.assert_array_equal(arms["moved again"], arms["moved"])
    assert not np.array_equal(arms["moved as given"], arms["moved"])


@pytest.mark.parametrize("strategy", ["bbkb", "gp-ucb", "gp-bucb", "thompson"])
def test_proposals_do_not_depend_on_the_units_of_values_spanning_more_than_one(strategy):
    """Once the observed values span more than 1 (here from an imported start), they are
    min-max rescaled: multiplying them by 2 or 32 and shifting them gives the same run (a
    model fed the values unscaled would exploit far more at 32: the exact GP's run differs)."""
    X, f = smooth_problem(n=300, d=2, seed=2)
    f = np.round(f * 1024.0) / 1024.0
    imported = np.random.default_rng(3).choice(len(X), size=30, replace=False)
    arms = []
    for transform in (lambda v: 2.0 * v - 100.0, lambda v: 32.0 * v + 7.0):
        engine = Strategy(X, _auto_config(strategy=strategy))
        for arm in imported:
            engine.observe(int(arm), float(transform(f[arm])))
        assert np.ptp(transform(f[imported])) > 1.0
        arms.append(run(engine, transform(f), 120, np.random.default_rng(0), noise=0.0))
        assert engine.hyperparameters.fitted_at > 0
    np.testing.assert_array_equal(arms[0], arms[1])


def test_a_refit_starts_from_the_last_kept_fit_in_its_own_value_units(monkeypatch):
    """The stored variance and noise are in the values' units (the fit's, times its scale
    squared), and the next fit, on the scale of its own opening, starts from them divided by
    that scale squared: the last kept fit's model, whatever the values' range did since."""
    import service.engine.strategy as strategy_module

    scalings: list[tuple[float, float]] = []
    calls: list[tuple[float, object, object]] = []
    value_scaling = Strategy._value_scaling

    def recording_scaling(self, observed):
        scalings.append(value_scaling(self, observed))
        return scalings[-1]

    def recording_fit(*args, **kwargs):  # _refit takes its scale just before it fits
        result = fit(*args, **kwargs)
        calls.append((scalings[-1][1], kwargs["start"], result))
        return result

    monkeypatch.setattr(Strategy, "_value_scaling", recording_scaling)
    monkeypatch.setattr(strategy_module, "fit", recording_fit)
    X, f = smooth_problem(n=300, d=2, seed=4)
    strategy = Strategy(X, _auto_config())
    run(strategy, 40.0 * f - 15.0, 250, np.random.default_rng(0))
    kept, rescaled = None, 0
    for scale, start, result in calls:
        if kept is not None:
            kept_scale, kept_fit = kept
            rescaled += scale != kept_scale
            assert start.variance == pytest.approx(kept_fit.variance * (kept_scale / scale) ** 2)
            assert start.noise == pytest.approx(kept_fit.noise * (kept_scale / scale) ** 2)
        if result.significant:
            kept = scale, result.hyperparameters
    assert kept is not None and rescaled >= 1  # the range grew between two fits
    state = strategy.hyperparameters
    assert state.variance == pytest.approx(kept[1].variance * kept[0] ** 2)
    assert state.noise == pytest.approx(kept[1].noise * kept[0] ** 2)


@pytest.mark.parametrize("low, high, offset, scale", [
    (0.2, 0.7, 0.0, 1.0),              # in [0, 1]: left alone
    (-0.02, 1.03, 0.0, 1.0),           # outside by up to 3 noise sd (0.03): still left alone
    (-0.5, 0.2, -0.47, 1.0),           # below: shifted up until the lowest is at -0.03
    (3.0, 3.4, 2.37, 1.0),             # above: shifted down until the highest is at 1.03
    (-7.0, 43.0, -7.0 + 0.03 * 50.0 / 1.06, 50.0 / 1.06)])  # wider: onto [-0.03, 1.03]
def test_the_model_sees_the_observed_values_in_zero_one_and_predicts_in_their_units(
        low, high, offset, scale):
    """The batch's (offset, scale) come from the values observed at its opening (all of
    ``low``..``high`` here), and the mean :meth:`Strategy.predict` returns is in the values'
    units again."""
    X, f = smooth_problem(n=200, d=2, seed=3)
    values = low + (high - low) * (f - f.min()) / np.ptp(f)
    strategy = Strategy(X, strategy="bkb", kernel={"name": "rbf", "lengthscale": 0.3},
                        lam=0.01, mode="sync", seed=1)
    best, worst = int(np.argmax(values)), int(np.argmin(values))
    strategy.observe(best, float(values[best]))
    strategy.observe(worst, float(values[worst]))
    run(strategy, values, 40, np.random.default_rng(0), noise=0.0)
    strategy.ask(1)  # opens a batch on every value told so far
    assert strategy._values == pytest.approx((offset, scale))
    seen = np.unique(strategy.records["arm"][strategy.records["folded"] >= 0])
    model_mean = strategy._posterior.mean[seen]
    assert -0.1 <= model_mean.min() and model_mean.max() <= 1.1
    mean, _ = strategy.predict()
    np.testing.assert_allclose(mean[seen], values[seen], atol=0.05 * max(1.0, high - low))


def test_failed_arms_do_not_count_towards_the_arms_a_fit_needs():
    """Abandoned selections bring no value, so the phase before the first fit runs until 20
    arms that did not fail (before, three failures let near-greedy UCB repeat itself until
    t ~ 400)."""
    X, f = smooth_problem(n=300, d=2, seed=3)
    strategy = Strategy(X, _auto_config(explore=1e-3))
    rng, abandoned = np.random.default_rng(0), 0
    while strategy.hyperparameters.fitted_at == 0 and strategy.t < 400:
        for sel in strategy.ask_batch():
            if abandoned < 3 and sel.t > 0:
                strategy.abandon(sel.t)
                abandoned += 1
            else:
                strategy.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
    records = strategy.records
    observed = records["status"] == OBSERVED
    assert abandoned == 3 and strategy.t < 2 * REFIT_MIN_ARMS + 10
    assert len(np.unique(records["arm"][observed])) >= REFIT_MIN_ARMS


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_restores_in_the_phase_before_the_first_fit_are_exact(mode):
    """Failures, imports and pending arms shape the phase; a strategy rebuilt from its state
    at any step makes the same proposals as the live one."""
    X, f = smooth_problem(n=250, d=2, seed=6)
    cfg = _auto_config(mode=mode)
    live = Strategy(X, cfg)
    rng = np.random.default_rng(1)
    pending: list = []
    for step in range(45):
        if step == 10:
            live.observe(int(rng.integers(250)), 0.5)  # an import mid-phase
        pending += live.ask(int(rng.integers(1, 4)))
        while pending and rng.random() < 0.7:
            sel = pending.pop(0)
            if rng.random() < 0.1:
                live.abandon(sel.t)
            else:
                live.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
        restored = Strategy.restore(X, cfg, live.state())
        assert restored.replay_mismatches == 0
        assert restored.hyperparameters == live.hyperparameters
        assert restored.batch_closed == live.batch_closed
        proposals = live.ask(2)
        assert [s.arm for s in restored.ask(2)] == [s.arm for s in proposals]
        pending += proposals
    assert live.hyperparameters.fitted_at > 0  # the run left the phase
    assert any(b.stop_reason == "repeat" for b in live.batches)


def test_refits_grow_rarer_as_the_data_grows():
    """The issue's schedule: a refit only once the observations grew REFIT_GROWTH (1.5) times
    since the last one, so a run of n observations refits O(log n) times."""
    X, f = smooth_problem(n=400, d=2)
    strategy = Strategy(X, seed=0)
    run(strategy, f, 800, np.random.default_rng(0))
    fits = sorted({b.hyperparameters["fitted_at"] for b in strategy.batches} - {0})
    assert fits[0] >= REFIT_MIN_OBSERVATIONS and fits[-1] >= 800 / REFIT_GROWTH
    assert np.all(np.diff(np.log(fits)) >= np.log(REFIT_GROWTH))
    assert len(fits) <= 1 + np.log(800 / fits[0]) / np.log(REFIT_GROWTH)
    # each batch that refit records the fit's time, the others none (BatchInfo.refit_seconds)
    moved = [a.hyperparameters["fitted_at"] != b.hyperparameters["fitted_at"]
             for a, b in zip(strategy.batches[:-1], strategy.batches[1:], strict=True)]
    timed = [np.isfinite(b.refit_seconds) for b in strategy.batches[1:]]
    assert timed == moved and sum(timed) == len(fits)
    assert all(0 < b.refit_seconds < b.open_seconds for b in strategy.batches
               if np.isfinite(b.refit_seconds))
