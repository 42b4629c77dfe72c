"""GO-UCB: hand-written gradients, rank-one Sigma^-1, realizable objective, exact replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import qmc

from service.engine import ConfigError, EngineConfig, Strategy
from service.engine.goucb import GOUCBPosterior, Network

from .replay import assert_same_proposals, random_history


def test_weight_gradients_match_finite_differences():
    rng = np.random.default_rng(0)
    net = Network(dim=4, hidden=6)
    w, X = net.initial(rng), rng.standard_normal((5, 4))
    f, G = net.gradient(X, w)
    np.testing.assert_allclose(f, net.value(X, w))
    eps = 1e-6
    for k in range(net.size):
        step = np.zeros(net.size)
        step[k] = eps
        fd = (net.value(X, w + step) - net.value(X, w - step)) / (2 * eps)
        np.testing.assert_allclose(G[:, k], fd, rtol=1e-6, atol=1e-8)


def test_rank_one_updates_match_recomputing_sigma():
    rng = np.random.default_rng(1)
    G = rng.standard_normal((40, 7))
    B = rng.standard_normal((7, 7))
    sigma = 3.0 * np.eye(7) + B @ B.T
    post = GOUCBPosterior(np.zeros(40), G, sigma, 1.0)
    np.testing.assert_allclose(post.variance_start,
                               np.einsum("ij,ji->i", G, np.linalg.solve(sigma, G.T)))
    for arm in (3, 17, 3, 29):
        post.add_pending(arm)
        sigma = sigma + np.outer(G[arm], G[arm])
        expected = np.einsum("ij,ji->i", G, np.linalg.solve(sigma, G.T))
        np.testing.assert_allclose(post.variance(np.arange(40)), expected, rtol=1e-9)
        np.testing.assert_allclose(post.solve(G[5]), np.linalg.solve(sigma, G[5]), rtol=1e-9)


def _paper_f1(d: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The paper's f1 (Sec. 6.1): the network with every weight and bias 1, on [-5, 5]^d."""
    X = qmc.scale(qmc.Sobol(d, scramble=True, seed=0).random(n), -5 * np.ones(d), 5 * np.ones(d))
    net = Network(d, 25)
    return X, net.value(X, np.ones(net.size))


def test_finds_the_optimum_of_a_realizable_objective():
    X, f = _paper_f1(d=5, n=512)
    strategy = Strategy(X, strategy="go-ucb", horizon=64, mode="sync", seed=0)
    arms: list[int] = []
    while len(arms) < 64:
        for sel in strategy.ask_batch():
            strategy.tell(sel.t, float(f[sel.arm]))
            arms.append(sel.arm)
    phase_one = math.ceil(math.sqrt(64))
    assert len(set(arms[:phase_one])) == phase_one
    assert int(np.argmax(f)) in arms[phase_one:]
    assert np.mean(f.max() - f[arms[-10:]]) < 0.01 * np.ptp(f)


@pytest.mark.parametrize("batch_rule", ["sequential", "fixed"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_restore_proposes_the_same_candidates(mode, batch_rule):
    X, f = _paper_f1(d=3, n=128)
    cfg = EngineConfig(strategy="go-ucb", horizon=16, goucb_hidden=5, mode=mode,
                       batch_rule=batch_rule, batch_size=3, seed=3)
    live = Strategy(X, cfg)
    pending = random_history(live, f, np.random.default_rng(2))
    live.observe(5, float(f[5]))  # an import
    assert_same_proposals(live, Strategy.restore(X, cfg, live.state()), pending, f)


def test_each_record_is_linearised_once_whatever_t():
    """g_i = grad f(x_i; w_{b(i)}) never changes, but every opening recomputed it for every
    record, batch by batch in a Python loop: O(t) gradient rows per step (1356 at t ~ 700).
    Each record is now computed once (with its whole batch): the rows per step do not grow."""
    X, f = _paper_f1(d=3, n=128)
    strategy = Strategy(X, EngineConfig(strategy="go-ucb", horizon=200, goucb_hidden=5,
                                        mode="sync", seed=1))
    model = strategy._literature
    rows: list[int] = []
    real = model.net.gradient

    def counted(points: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(points) < len(X) and any(w is v for v in model.weights.values()):
            rows.append(len(points))  # records' rows at an estimate w_b (not the ask's over
        return real(points, w)      # every candidate, nor Phase I's fit)

    model.net.gradient = counted
    per_step = []
    while strategy.t < 150:
        before = sum(rows)
        for sel in strategy.ask(1):
            strategy.tell(sel.t, float(f[sel.arm]))
        per_step.append(sum(rows) - before)
    assert sum(rows) <= strategy.t  # each record at most once
    assert max(per_step[30:]) <= 1  # past Phase I: the one new record of the last batch
def test_pending_points_shrink_the_width_but_not_the_estimate():
    X, f = _paper_f1(d=3, n=128)
    strategy = Strategy(X, strategy="go-ucb", horizon=16, goucb_hidden=5, mode="async",
                        batch_rule="fixed", batch_size=4, seed=1)
    for sel in strategy.ask(4):  # Phase I, observed
        strategy.tell(sel.t, float(f[sel.arm]))
    batch = strategy.ask(4)  # Phase II batch 1: the estimate is frozen, variances shrink
    post = strategy._posterior
    np.testing.assert_array_equal(post.mean, strategy.predict()[0])
    assert np.all(post.variance(np.arange(len(X))) <= post.variance_start + 1e-12)
    assert post.variance(np.array([batch[0].arm]))[0] < post.variance_start[batch[0].arm]


@pytest.mark.parametrize(("change", "field"), [
    ({"horizon": 3}, "horizon"),
    ({"goucb_hidden": 0}, "goucb_hidden"),
    ({"horizon": 10**400}, "horizon"),  # accepted, then every ask overflowed
    ({"goucb_beta": -1.0}, "goucb_beta"),
    ({"goucb_lam": 0.0}, "goucb_lam"),
    ({"batch_rule": "adaptive"}, "batch_rule"),
])
def test_bad_configurations_name_the_field(change, field):
    with pytest.raises(ConfigError) as err:
        EngineConfig(strategy="go-ucb", **change)
    assert err.value.field == field


def test_an_overlong_horizon_is_refused_with_a_short_message():
    with pytest.raises(ConfigError, match=r"horizon must be an integer in \[4, 1000000000000\], "
                       r"got 10000000000000000000\.\.\. \(401 characters\)$"):
        EngineConfig(strategy="go-ucb", horizon=10**400)


def test_values_far_beyond_phase_ones_spread_keep_every_ask_finite():
    """After a Phase I of equal values (scale 1), a value of 1e100 overflowed w_b, the
    gradients and Sigma: every later ask raised LinAlgError (a 500 in the service)."""
    strategy = Strategy(np.array([[0.5]]), strategy="go-ucb", mode="async", horizon=16,
                        goucb_hidden=4, seed=0)
    values = iter([0.0, 1e100, -1e100, 3.0, 1e100, 0.0, 5.0, 1e99])
    for _ in range(4):
        for selection in strategy.ask(2):
            strategy.tell(selection.t, next(values))
    mean, variance = strategy.predict()
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(variance))
    assert len(strategy.ask(2)) == 2
