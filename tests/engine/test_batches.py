"""Batch construction: stopping rules (Lemmas 1 and 3), lazy UCB, dictionary growth."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import Strategy
from service.engine.rules import FixedSizeRule, UntilRepeatRule
from service.engine.selectors import LazyUCB

from .helpers import each_step, run, smooth_problem


def _ucb_strategy(rule: str = "global", **kw) -> tuple[Strategy, np.ndarray]:
    X, f = smooth_problem(n=300, d=2, seed=kw.pop("problem_seed", 0))
    cfg = dict(strategy="bbkb", kernel={"name": "rbf", "lengthscale": 0.2}, lam=0.5,
               stopping_rule=rule, mode="sync", batch_threshold=2.0, seed=3, explore=1.0)
    return Strategy(X, **(cfg | kw)), f


def test_lemma1_ratio_bound_holds_along_a_run():
    """sigma~^2_start(x) / sigma~^2_t(x) <= 1 + sum_batch sigma~^2_start(x_s) for every x."""
    strategy, f = _ucb_strategy("global", batch_threshold=3.0)
    rng = np.random.default_rng(0)
    all_arms = np.arange(strategy.n_arms)
    checked = 0
    for _ in each_step(strategy, f, 40, rng):
        post, rule = strategy._posterior, strategy._rule
        if not hasattr(rule, "accumulator"):
            continue  # the initial design batch
        ratio = post.variance_start / post.variance(all_arms)
        assert np.all(ratio <= rule.accumulator * (1 + 1e-9))
        checked += 1
    assert checked > 100
    assert max(b.size for b in strategy.batches) >= 5


def test_local_batches_are_at_least_as_large_as_global_ones_on_the_same_state():
    """Lemma 3's bound is below Lemma 1's (Cauchy-Schwarz), so its batches are never shorter."""
    strategy, f = _ucb_strategy("global")
    rng = np.random.default_rng(1)
    larger = 0
    for _ in range(30):
        state = strategy.state()
        sizes = {}
        for rule in ("global", "local", "combined"):
            config = strategy.config.replace(stopping_rule=rule)
            twin = Strategy.restore(strategy.candidates, config, state)
            sizes[rule] = len(twin.ask_batch())
        assert sizes["local"] >= sizes["global"]
        assert sizes["combined"] == sizes["local"]
        larger += sizes["local"] > sizes["global"]
        for sel in strategy.ask_batch():
            strategy.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
    assert larger >= 5  # the local rule does give larger batches once batches grow


@pytest.mark.parametrize("strategy_name", ["bbkb", "gp-bucb"])
def test_lazy_argmax_equals_full_argmax(strategy_name):
    strategy, f = _ucb_strategy(strategy=strategy_name, explore=0.3)
    rng = np.random.default_rng(2)
    all_arms = np.arange(strategy.n_arms)
    compared = touched = 0
    for _ in range(40):
        strategy._open_batch()  # every result is in: open the next batch explicitly
        batch = []
        while not strategy.batch_closed:
            sel = strategy._selector
            if isinstance(sel, LazyUCB):
                full = int(np.argmax(sel.ucb(all_arms)))
                before = sel.refreshed
                batch += strategy.ask(1)
                assert batch[-1].arm == full
                touched += sel.refreshed - before
                compared += 1
            else:
                batch += strategy.ask(1)
        for s in batch:
            strategy.tell(s.t, f[s.arm] + 0.01 * rng.standard_normal())
    assert compared > 60
    assert touched < 0.5 * compared * strategy.n_arms  # lazy evaluation touches few arms


def test_dictionary_grows_far_slower_than_t_on_a_smooth_function():
    """Theorem 1: |S_t| = O(d_eff), not O(t)."""
    X, f = smooth_problem(n=2000, d=2, seed=4)
    strategy = Strategy(X, strategy="bbkb", kernel={"name": "rbf", "lengthscale": 0.3},
                        lam=1.0, mode="sync", seed=0)
    rng = np.random.default_rng(4)
    sizes = {}
    for T in (500, 1000, 2000):
        run(strategy, f, T - strategy.t, rng)
        sizes[T] = len(strategy.dictionary)
    assert sizes[2000] < 0.05 * 2000
    assert sizes[2000] < 1.5 * sizes[500]  # near-constant, not linear growth
    assert len(strategy.batches) < 2000 / 5  # far fewer resparsifications than steps


def test_bkb_resparsifies_every_step_and_gp_ucb_is_sequential():
    X, f = smooth_problem(n=150)
    rng = np.random.default_rng(5)
    for name in ("bkb", "gp-ucb"):
        strategy = Strategy(X, strategy=name, kernel={"name": "rbf", "lengthscale": 0.3},
                            mode="sync")
        run(strategy, f, 30, rng)
        assert all(b.size == 1 for b in strategy.batches)
        assert len(strategy.batches) == 30


@pytest.mark.parametrize("name", ["thompson", "epsilon-greedy", "uniform"])
def test_fixed_batch_baselines_use_the_configured_batch_size(name):
    X, f = smooth_problem(n=150)
    strategy = Strategy(X, strategy=name, batch_size=7, mode="sync",
                        kernel={"name": "rbf", "lengthscale": 0.3})
    run(strategy, f, 50, np.random.default_rng(6))
    sizes = [b.size for b in strategy.batches]
    expected_first = 1 if name != "uniform" else 7  # model-based strategies start with one point
    assert sizes[0] == expected_first and all(s == 7 for s in sizes[1:-1])


def test_uncertainty_sampling_guarantees_a_minimum_batch_size():
    """BBKB Section 4 / Alg. 3: after max sigma^2 <= 1/P, batches hold >= ~P (C~ - 1) / 3."""
    X, f = smooth_problem(n=400, d=2, seed=7)
    P = 8
    strategy = Strategy(X, strategy="bbkb", kernel={"name": "rbf", "lengthscale": 0.3},
                        lam=1.0, min_parallelism=P, batch_threshold=2.0, mode="sync")
    rng = np.random.default_rng(7)
    init = strategy.ask_batch()
    assert strategy.batches[0].stop_reason == "initial" and len(init) > P
    for sel in init:
        strategy.tell(sel.t, f[sel.arm])
    run(strategy, f, 300, rng)
    later = [b.size for b in strategy.batches[1:-1]]
    assert min(later) >= P * (2.0 - 1.0) / 3


def test_warm_start_builds_a_dictionary_from_imported_data():
    X, f = smooth_problem(n=500, d=2, seed=8)
    rng = np.random.default_rng(8)
    strategy = Strategy(X, strategy="bbkb", kernel={"name": "rbf", "lengthscale": 0.2},
                        lam=0.1, mode="sync", explore=0.1)
    imported = rng.choice(500, size=300, replace=False)
    for arm in imported:
        strategy.observe(int(arm), f[arm])
    batch = strategy.ask_batch()
    info = strategy.batches[0]
    assert info.stop_reason != "initial"  # no random first point: the data is the start
    assert 0 < info.dictionary_size < 300
    mean, _ = strategy.predict()
    assert np.corrcoef(mean, f)[0, 1] > 0.9  # the imported values shape the posterior
    assert f[batch[0].arm] > np.quantile(f, 0.9)  # and the first suggestion is a good arm


def test_a_large_import_mid_run_keeps_the_dictionary_small():
    """Imports fold in with leverage-score sampling, not stale start-of-batch variances."""
    X, f = smooth_problem(n=3000, d=2, seed=9)
    strategy = Strategy(X, strategy="bbkb", kernel={"name": "rbf", "lengthscale": 0.3},
                        lam=1.0, mode="sync", seed=0, explore=1.0)
    rng = np.random.default_rng(9)
    run(strategy, f, 100, rng)
    before = len(strategy.dictionary)
    for arm in rng.choice(3000, size=2000, replace=False):
        strategy.observe(int(arm), f[arm])
    run(strategy, f, 10, rng)
    assert len(strategy.dictionary) < max(4 * before, 100) < 2000


class _ShrinkingPosterior:
    """Frozen mean, variances that only shrink step after step (the in-batch situation)."""

    def __init__(self, mean: np.ndarray, variance: np.ndarray) -> None:
        self.mean, self.variance_start = mean, variance
        self.current = variance.copy()

    def variance(self, idx: np.ndarray) -> np.ndarray:
        return self.current[idx]


@pytest.mark.parametrize("seed", range(6))
def test_lazy_argmax_breaks_ties_to_the_lowest_index_like_argmax(seed):
    """Groups of arms whose variances shrink by exact factors of 4 collide with other groups, so
    exact ties between arms refreshed at different times are common."""
    rng = np.random.default_rng(seed)
    A = 3000
    group = rng.integers(0, 4, size=A)
    posterior = _ShrinkingPosterior(np.zeros(A), 4.0 ** group)
    selector = LazyUCB()
    selector.start(posterior, width=0.7)
    for _ in range(60):
        full = posterior.mean + 0.7 * np.sqrt(posterior.current)
        assert selector.select(rng) == int(np.argmax(full))
        shrunk = group == rng.integers(0, 4)
        posterior.current = np.where(shrunk & (rng.random(A) < 0.5), posterior.current / 4.0,
                                     posterior.current)
    assert selector.refreshed < 60 * A / 4


def test_until_repeat_rule_closes_at_the_first_repeat_and_keeps_the_inner_rule():
    def reasons(arms: list[int], size: int) -> list[str | None]:
        rule = UntilRepeatRule(FixedSizeRule(size))
        rule.start(None)  # type: ignore[arg-type]  # FixedSizeRule reads no posterior
        return [rule.closes(arm) for arm in arms]

    assert reasons([4, 7, 4], size=5) == [None, None, "repeat"]
    assert reasons([4, 7, 9], size=3) == [None, None, "fixed"]  # the inner rule still counts
    assert reasons([4, 4], size=2) == [None, "repeat"]
