"""GSSBO: buffer invariants, equivalence with GP-UCB when nothing is dropped, exact replay."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import linalg

from service.engine import ConfigError, EngineConfig, Strategy, gssbo
from service.engine.config import GSSBO_SELECTIONS as SELECTIONS
from service.engine.gssbo import GSSPosterior, TimeRule, diverse_subset, select_buffer
from service.engine.hyperparameters import Hyperparameters
from service.engine.kernels import Matern52

from .helpers import run, smooth_problem
from .replay import assert_same_proposals, random_history


@pytest.mark.parametrize("selection", SELECTIONS)
def test_buffer_keeps_the_initial_and_the_newest_points(selection):
    rng = np.random.default_rng(0)
    X, y = rng.random((60, 3)), rng.standard_normal(60)
    hp = Hyperparameters((0.4,), 1.0, 0.01)
    buffer = select_buffer(X, y, 10, 25, selection, hp, np.random.default_rng(1), 0.1)
    kept = buffer.buffer
    assert len(kept) == 25 and len(np.unique(kept)) == 25
    assert set(range(10)) <= set(kept.tolist()) and 59 in kept
    assert kept.min() >= 0 and kept.max() < 60


def test_diverse_subset_is_the_greedy_minimum_cosine_choice():
    G = np.array([[1.0, 0, 0], [2.0, 0, 0], [0, 1.0, 0], [0, 0, 3.0], [-1.0, 0, 0]])
    # forced e1: -e1 (cosine -1) comes first
    chosen = diverse_subset(G, np.array([0]), 1, np.random.default_rng(0), noise=0.0)
    assert chosen.tolist() == [0, 4]
    # without it: e2 and e3 (summed cosine 0), never e1's copy (+1)
    without = diverse_subset(G[:4], np.array([0]), 2, np.random.default_rng(0), noise=0.0)
    assert without.tolist() == [0, 2, 3]


def test_a_large_buffer_is_plain_gp_ucb():
    X, f = smooth_problem(n=150, d=2, seed=3)
    runs = {}
    for size in (None, 10**6):
        strategy = Strategy(X, strategy="gssbo", gssbo_initial=5, gssbo_buffer=size,
                            mode="sync", seed=2)
        runs[size] = (run(strategy, f, 30, np.random.default_rng(0)), strategy)
    np.testing.assert_array_equal(runs[None][0], runs[10**6][0])
    strategy = runs[None][1]
    strategy.ask(1)  # opens a batch on all 30 observations
    post = strategy._posterior
    assert isinstance(post, GSSPosterior) and len(post.buffer.buffer) == 30
    # textbook GP on every observation with the fitted hyper-parameters (gssbo scales X to the
    # unit cube; smooth_problem's X already spans about [0, 1])
    hp, records = post.hyperparameters, strategy.records
    Xu = strategy._literature.X
    arms, y = records["arm"][:30], records["value"][:30]
    kernel = Matern52(hp.lengthscale[0], hp.variance)
    K = kernel(Xu[arms], Xu[arms]) + hp.noise * np.eye(30)
    ys = (y - post.y_mean) / post.y_scale
    kx = kernel(Xu, Xu[arms])
    mean = post.y_mean + post.y_scale * kx @ linalg.solve(K, ys, assume_a="pos")
    var = hp.variance - np.einsum("ij,ji->i", kx, linalg.solve(K, kx.T, assume_a="pos"))
    np.testing.assert_allclose(post.mean, mean, atol=1e-8)
    np.testing.assert_allclose(post.variance_start, var / hp.noise, rtol=1e-6, atol=1e-8)


def test_selection_rules_change_only_the_buffer():
    X, f = smooth_problem(n=200, d=2, seed=4)
    posts = {}
    for selection in ("gradient", "random"):
        strategy = Strategy(X, strategy="gssbo", gssbo_initial=5, gssbo_buffer=12,
                            gssbo_selection=selection, mode="sync", seed=1)
        arms = run(strategy, f, 25, np.random.default_rng(0)).tolist()
        strategy.ask(1)
        posts[selection] = (strategy._literature.last, arms[:5])
    (grad, first), (rand, first_random) = posts["gradient"], posts["random"]
    assert first == first_random  # same initial design
    np.testing.assert_array_equal(grad.buffer.pilot, rand.buffer.pilot)
    for post in (grad, rand):
        assert len(post.buffer.buffer) == 12
        assert set(range(5)) | {24} <= set(post.buffer.buffer.tolist())
    assert not np.array_equal(grad.buffer.buffer, rand.buffer.buffer)


@pytest.mark.parametrize("full_fit_every", [100, 8])  # 8: most fits refine an anchor
@pytest.mark.parametrize("batch_rule", ["sequential", "product", "fixed"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_restore_proposes_the_same_candidates(mode, batch_rule, full_fit_every, monkeypatch):
    monkeypatch.setattr(gssbo, "FULL_FIT_EVERY", full_fit_every)
    X, f = smooth_problem(n=150, d=2, seed=5)
    cfg = EngineConfig(strategy="gssbo", gssbo_initial=4, gssbo_buffer=9, mode=mode,
                       batch_rule=batch_rule, batch_size=3, batch_threshold=1.5, seed=7)
    live = Strategy(X, cfg)
    pending = random_history(live, f, np.random.default_rng(1))
    live.observe(3, f[3])  # an import
    assert_same_proposals(live, Strategy.restore(X, cfg, live.state()), pending, f)


def test_time_rule_fixes_the_buffer_once_a_fit_is_slow():
    rule = TimeRule(factor=4.0, warmup=3)
    for n, seconds in enumerate([1.0, 1.0, 1.0, 3.9, 4.1, 100.0], start=20):
        rule.record(seconds, n)
    assert rule.size == 24  # the first fit above 4 x the warm-up average, never changed after


@pytest.mark.parametrize(("change", "field"), [
    ({"gssbo_selection": "gradients"}, "gssbo_selection"),
    ({"gssbo_buffer": 20}, "gssbo_buffer"),  # must exceed n0 = 20
    ({"gssbo_initial": 0}, "gssbo_initial"),
    ({"gssbo_gradient_noise": -0.1}, "gssbo_gradient_noise"),
    ({"gssbo_time_factor": 4.0}, "gssbo_time_factor"),  # needs gssbo_buffer null
    ({"gssbo_buffer": None, "gssbo_time_factor": 0.5}, "gssbo_time_factor"),
    ({"batch_rule": "global"}, "batch_rule"),
    ({"fit_restarts": -1}, "fit_restarts"),
    # the engine's kernel never reaches GSSBO's own GP: refused rather than silently unused
    ({"kernel": {"name": "rbf", "lengthscale": 2.0}}, "kernel"),
    ({"kernel": {"name": "matern52"}}, "kernel"),
    ({"hyperparameters": "fixed"}, "hyperparameters"),
    ({"normalize": "none"}, "normalize"),
    ({"ard": True}, "ard"),
    ({"normalize_values": "none"}, "normalize_values"),  # GSSBO standardises its values
    ({"normalize_values": "zscore"}, "normalize_values"),  # not a choice at all
])
def test_bad_configurations_name_the_field(change, field):
    with pytest.raises(ConfigError) as err:
        EngineConfig(strategy="gssbo", **change)
    assert err.value.field == field


@pytest.mark.parametrize("strategy", ["gssbo", "go-ucb"])
def test_the_default_kernel_settings_round_trip_for_strategies_with_their_own_model(strategy):
    """Stored specs carry the resolved defaults (kernel, hyperparameters, normalize, ard):
    restoring them must not trip the refusal of kernel settings."""
    config = EngineConfig(strategy=strategy, kernel={"name": "rbf"})
    assert EngineConfig.from_dict(config.to_dict()) == config


def test_batches_record_gssbos_own_fit_and_restores_keep_it():
    """GSSBO's batches recorded the engine's start values (lengthscale 2.0, source "start"),
    which its Matern GP never used: now each batch records the fit its posterior runs on."""
    X, f = smooth_problem(n=150, d=2, seed=5)
    cfg = EngineConfig(strategy="gssbo", gssbo_initial=4, gssbo_buffer=9, seed=7)
    live = Strategy(X, cfg)
    run(live, f, 20, np.random.default_rng(2))
    assert live.batches[0].hyperparameters is None  # the initial design uses no model
    model = live._posterior  # the current batch's GP
    hp, scale = model.hyperparameters, model.y_scale
    recorded = live.hyperparameters
    assert recorded is not None and recorded.to_dict() == live.batches[-1].hyperparameters
    assert recorded.source == "fit" and recorded.fitted_at == 19  # every observation so far
    assert recorded.lengthscale == hp.lengthscale and recorded.smoothing == 1.0  # the fit's own
    assert recorded.variance == pytest.approx(hp.variance * scale**2)
    assert recorded.noise == pytest.approx(hp.noise * scale**2)
    assert recorded.lam == pytest.approx(hp.noise / hp.variance)
    assert len({b.hyperparameters["lengthscale"][0] for b in live.batches[1:]}) > 1  # refits
    restored = Strategy.restore(X, cfg, live.state())
    assert restored.hyperparameters == recorded


@pytest.mark.parametrize("strategy", ["uniform", "go-ucb"])
def test_strategies_without_a_kernel_record_no_hyperparameters(strategy):
    X, f = smooth_problem(n=150, d=2, seed=5)
    live = Strategy(X, EngineConfig(strategy=strategy, horizon=40, seed=7))
    run(live, f, 20, np.random.default_rng(2))
    assert live.hyperparameters is None and live.state().hyperparameters is None
    assert all(b.hyperparameters is None for b in live.batches)
    assert Strategy.restore(X, live.config, live.state()).hyperparameters is None


def test_values_spread_over_1e_300_give_the_proposals_of_the_same_values_scaled_up():
    """A fit's variances in such values' own units underflowed to 0 (a ZeroDivisionError at
    every ask, a 500 in the service); a power of two scales every step of GSSBO exactly."""
    X, f = smooth_problem(n=40, d=2, seed=0)

    def arms(scale: float) -> list[int]:
        strategy, out = Strategy(X, strategy="gssbo", seed=1), []
        for _ in range(12):
            (selection,) = strategy.ask(1)
            out.append(selection.arm)
            strategy.tell(selection.t, float(f[selection.arm]) * scale)
        return out

    assert arms(2.0**-1000) == arms(1.0)
    strategy = Strategy(np.array([[0.0], [0.5], [1.0]]), strategy="gssbo", seed=0)
    for value in (0.0, 1e-300, 0.0, 1e-300, 2e-300):
        (selection,) = strategy.ask(1)
        strategy.tell(selection.t, value)
    assert len(strategy.ask(1)) == 1


def test_the_pilot_factor_survives_repeated_arms_at_a_tiny_noise():
    """GSSBO's gradient rule factored its pilot kernel matrix with a bare Cholesky: repeated
    arms at a fitted noise near zero made it singular, a LinAlgError (a 500 in the service).
    It takes the jitter ladder of the other posteriors."""
    X = np.repeat(np.random.default_rng(0).random((3, 2)), 4, axis=0)
    _, L = gssbo._factor(X, Hyperparameters((0.5,), 1.0, 1e-300))
    assert np.isfinite(L).all()
    assert np.allclose((L @ L.T)[:4, :4], 1.0, atol=1e-6)  # the repeats' block, jittered
