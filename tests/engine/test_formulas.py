"""The papers' formulas, each pinned against its own statement: the resparsification
probabilities (BBKB Alg. 1 lines 11-16), Theorem 2's confidence width, Lemma 3's ratio bound
and GP-BUCB's product rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.engine import Strategy
from service.engine.dictionary import resparsify
from service.engine.records import OBSERVED
from service.engine.rules import ProductRule

from .helpers import each_step, smooth_problem


def _strategy(**kw) -> tuple[Strategy, np.ndarray]:  # type: ignore[no-untyped-def]
    X, f = smooth_problem(n=300, d=2, seed=0)
    cfg = dict(strategy="bbkb", kernel={"name": "rbf", "lengthscale": 0.2}, lam=0.5,
               mode="sync", batch_threshold=2.0, seed=3, explore=1.0)
    return Strategy(X, **(cfg | kw)), f


def test_resparsify_keeps_each_arm_with_probability_min_1_qbar_n_sigma2():
    """p_a = min(1, q-bar n_a sigma~^2_start(a)), drawn independently per arm."""
    arms = np.array([0, 3, 5, 7, 9])
    counts = np.array([1, 2, 1, 4, 1])
    variance = np.zeros(10)
    variance[arms] = [0.01, 0.02, 0.05, 0.5, 0.09]
    q = 2.0
    p = np.minimum(1.0, q * counts * variance[arms])  # 0.02, 0.08, 0.1, 1, 0.18
    draws = 20_000
    rng = np.random.default_rng(0)
    kept = np.zeros(len(arms))
    for _ in range(draws):
        kept += np.isin(arms, resparsify(arms, counts, variance, q, rng))
    frequency = kept / draws
    assert frequency[p == 1.0].tolist() == [1.0]
    sd = np.sqrt(p * (1 - p) / draws)
    assert np.all(np.abs(frequency - p) <= 5 * sd + 1e-12), (frequency, p)


def test_resparsify_never_returns_an_empty_dictionary():
    arms, counts = np.array([2, 4, 6]), np.array([1, 3, 1])
    variance = np.full(8, 1e-12)
    variance[6] = 2e-12  # p: 1e-12, 3e-12 (the largest), 2e-12
    for seed in range(50):
        assert resparsify(arms, counts, variance, 1.0, np.random.default_rng(seed)).tolist() \
            in ([4], [2, 4], [4, 6], [2, 4, 6], [2], [6], [2, 6])
    chosen = resparsify(arms, counts, variance, 1.0, np.random.default_rng(0))
    assert chosen.tolist() == [4]  # none drawn: the most likely arm
    assert resparsify(arms[:0], counts[:0], variance, 1.0, np.random.default_rng(0)).size == 0


def test_the_width_is_explore_times_c_times_theorem_2s_beta():
    """alpha = explore C~ beta, beta = 2 xi sqrt(sum_s log(1 + 3 sigma~^2_start(x_s))
    + log 1/delta) + (1 + sqrt 2) sqrt(lam) F over the observations folded in so far."""
    strategy, f = _strategy(explore=0.7, noise=0.05, delta=0.01, rkhs_bound=2.0,
                            batch_threshold=3.0)
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(12):
        for selection in strategy.ask_batch():
            strategy.tell(selection.t, f[selection.arm] + 0.05 * rng.standard_normal())
        strategy.ask(1)  # opens the next batch: its width is set from the folded observations
        b, start = strategy.batch, strategy.batches[-1].start
        records = strategy.records
        folded = records["folded"][:start]
        observed = (records["status"][:start] == OBSERVED) & (folded >= 0) & (folded <= b)
        info = float(np.sum(np.log1p(3.0 * records["var_start"][:start][observed])))
        beta = 2 * 0.05 * math.sqrt(info + math.log(1 / 0.01)) + (1 + math.sqrt(2)) * \
            math.sqrt(0.5) * 2.0
        assert strategy._selector.width == pytest.approx(0.7 * 3.0 * beta, rel=1e-12)
        checked += observed.sum() > 0
        for selection in strategy.ask_batch():
            strategy.tell(selection.t, f[selection.arm] + 0.05 * rng.standard_normal())
    assert checked >= 10


def test_lemma3_ratio_bound_holds_along_a_run():
    """sigma~^2_start(x) / sigma~^2_t(x) <= 1 + sum_batch k~_start(x, x_s)^2 / sigma~^2_start(x)
    for every candidate x, at every step of every batch (BBKB Lemma 3)."""
    strategy, f = _strategy(stopping_rule="local", batch_threshold=3.0)
    rng = np.random.default_rng(2)
    all_arms = np.arange(strategy.n_arms)
    checked = 0
    # batches of 1-2 points, then 4, 7, ..., 158 (the 21st)
    for _ in each_step(strategy, f, 21, rng):
        post, rule = strategy._posterior, strategy._rule
        if not hasattr(rule, "ratio"):
            continue  # the initial design batch
        ratio = post.variance_start / post.variance(all_arms)
        assert np.all(ratio <= (1.0 + rule.ratio) * (1 + 1e-9) + 1e-12)
        checked += 1
    assert checked > 100
    assert max(b.size for b in strategy.batches) >= 5


class _Variances:
    """A posterior whose variance at each step is read from a list (the rule's logic only)."""

    def __init__(self, values: list[float]) -> None:
        self.values = iter(values)

    def variance(self, idx: np.ndarray) -> np.ndarray:
        return np.array([next(self.values)])


def test_the_product_rule_closes_once_prod_1_plus_sigma2_exceeds_c():
    rule = ProductRule(threshold=2.0)
    rule.start(_Variances([0.2, 0.3, 0.25, 0.1]))  # 1.2, 1.56, 1.95, 2.145
    assert [rule.closes(arm) for arm in range(4)] == [None, None, None, "product"]
    assert rule.accumulator == pytest.approx(1.2 * 1.3 * 1.25 * 1.1)


def test_gp_bucb_multiplies_each_points_variance_before_it_joins_the_batch():
    """GP-BUCB (Desautels et al. 2014): the batch closes at the first s with
    prod_{s' <= s} (1 + sigma^2_{s'-1}(x_s')) > C, sigma^2_{s'-1} the exact posterior with the
    batch's earlier points pending."""
    strategy, f = _strategy(strategy="gp-bucb", batch_threshold=1.5)
    rng = np.random.default_rng(3)
    all_arms = np.arange(strategy.n_arms)
    closed = 0
    for _ in range(15):
        product, pending = 1.0, []
        while not strategy.batch_closed or not pending:
            before = strategy._posterior.variance(all_arms) if pending else None
            (selection,) = strategy.ask(1)
            if before is None:  # the batch's first point: its variance is the start's
                before = strategy._posterior.variance_start
            pending.append(selection)
            if not isinstance(strategy._rule, ProductRule):
                continue  # the initial design batch
            product *= 1.0 + before[selection.arm]
            assert strategy._rule.accumulator == pytest.approx(product, rel=1e-9)
            assert strategy.batch_closed == (product > 1.5)
        closed += strategy.batches[-1].stop_reason == "product"
        for sel in pending:
            strategy.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
    assert closed >= 10
