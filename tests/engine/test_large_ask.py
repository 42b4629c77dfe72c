"""Large asks: the in-place lazy UCB, the local rule's per-arm terms and the in-place rank-one
step give, bit for bit, what the plain forms they replaced give (benchmarks/large_ask.py)."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import RBF, Strategy
from service.engine.nystrom import NystromPosterior
from service.engine.rules import LocalRule
from service.engine.selectors import LazyUCB

from .helpers import smooth_problem


class _PlainLazyUCB(LazyUCB):
    """The lazy UCB as first written: gathers, negates and concatenates the touched arms' bounds
    at every step (O(refreshed so far) copies)."""

    def start(self, posterior, width, blocked=None):  # type: ignore[no-untyped-def]
        super().start(posterior, width, blocked)
        self.plain_touched = np.zeros(0, dtype=np.int64)

    def select(self, rng: np.random.Generator) -> int:
        k, A = self.first_block, len(self.bound)
        while True:
            fresh = self.order[self.next : self.next + k]
            self.next += len(fresh)
            old = self.plain_touched
            if len(old) > k:
                old = old[np.argpartition(-self.bound[old], k - 1)[:k]]
            top = np.concatenate([old, fresh])
            self.bound[top] = self.ucb(top)
            self.refreshed += len(top)
            self.plain_touched = np.concatenate([self.plain_touched, fresh])
            bounds = self.bound[self.plain_touched]
            best = int(self.plain_touched[bounds == bounds.max()].min())
            if self.next < A:
                rival = int(self.order[self.next])
                if (self.bound[rival], -rival) > (self.bound[best], -best):
                    k = min(4 * k, A)
                    continue
            if np.any(top == best):
                return best
            k = min(4 * k, A)


class _PlainLocalRule(LocalRule):
    """Lemma 3 recomputing k~_start(., x) at every selection, repeated arms included."""

    def add(self, arm: int) -> None:
        g = self._posterior.covariance_start(arm)
        self.ratio += g * g * self._inv_var


def _posterior(seed: int, duplicates: int = 1) -> NystromPosterior:
    rng = np.random.default_rng(seed)
    X = np.repeat(rng.random((600 // duplicates, 3)), duplicates, axis=0)
    pulled = rng.choice(len(X), size=80)
    arms, counts = np.unique(pulled, return_counts=True)
    observed = arms[: len(arms) // 2]
    sums = np.sin(5 * X[observed]).sum(axis=1) * counts[: len(observed)]
    return NystromPosterior(RBF(lengthscale=0.3), X, np.unique(pulled[:40]), lam=0.5,
                            pulled_arms=arms, pulled_counts=counts, observed_arms=observed,
                            observed_counts=counts[: len(observed)], observed_sums=sums,
                            block_rows=128)


@pytest.mark.parametrize(("seed", "duplicates", "width"), [(0, 1, 0.3), (1, 4, 1.0),
                                                           (2, 1, 3.0), (3, 3, 0.05)])
def test_lazy_ucb_refreshes_exactly_like_the_plain_form(seed, duplicates, width):
    """Same arms, same bound bits, same refresh count, step after step of a batch (blocked arms
    and exact ties from duplicate candidates included)."""
    plain_post, post = _posterior(seed, duplicates), _posterior(seed, duplicates)
    blocked = np.zeros(len(post.mean), dtype=bool)
    blocked[np.random.default_rng(seed).choice(len(blocked), 30)] = True
    plain, fast = _PlainLazyUCB(), LazyUCB()
    plain.start(plain_post, width, blocked)
    fast.start(post, width, blocked)
    rng = np.random.default_rng(0)
    for _ in range(400):
        arm = fast.select(rng)
        assert arm == plain.select(rng)
        assert not blocked[arm]
        np.testing.assert_array_equal(fast.bound, plain.bound)
        np.testing.assert_array_equal(fast.touched, plain.plain_touched)
        assert fast.refreshed == plain.refreshed
        post.add_pending(arm)
        plain_post.add_pending(arm)


def test_rank_one_step_in_place_equals_the_outer_product_form():
    post, reference = _posterior(4), _posterior(4)
    ginv = reference._ginv.copy()
    for arm in [3, 3, 17, 250, 3, 599]:
        post.add_pending(arm)
        z = reference.whitened[arm]
        u = ginv @ z
        ginv -= np.outer(u, u) / (1.0 + z @ u)
        np.testing.assert_array_equal(post._ginv, ginv)


ROOMY = LocalRule.cache_bytes


@pytest.mark.parametrize("cache_bytes", [ROOMY, 0, 2 * 600 * 8])
def test_local_rule_terms_are_computed_once_per_arm_and_add_up_identically(cache_bytes,
                                                                            monkeypatch):
    """The kept terms (even with room for one or two arms only) give the same ratio, bit for
    bit, with one covariance column per distinct arm when they all fit."""
    post = _posterior(5)
    calls: list[int] = []
    column = post.covariance_start

    def counted(arm: int) -> np.ndarray:
        calls.append(arm)
        return column(arm)

    monkeypatch.setattr(post, "covariance_start", counted)
    monkeypatch.setattr(LocalRule, "cache_bytes", cache_bytes)
    rule, plain = LocalRule(2.0), _PlainLocalRule(2.0)
    rule.start(post)
    plain.start(post)
    arms = [7, 7, 7, 90, 7, 90, 301, 7, 301, 301, 90] * 5
    calls.clear()
    for arm in arms:
        rule.add(arm)
    rule_calls = len(calls)
    for arm in arms:
        plain.add(arm)
    np.testing.assert_array_equal(rule.ratio, plain.ratio)
    if cache_bytes == ROOMY:
        assert rule_calls == len(set(arms))
    assert rule_calls <= len(arms)


@pytest.mark.parametrize("rule", ["local", "combined"])
def test_strategies_with_the_plain_components_propose_the_same_arms(rule, monkeypatch):
    """Whole runs (several batches, UCB settling on repeated arms) with the plain selector and
    rule in place of the engine's: identical selections and batch boundaries."""
    X, f = smooth_problem(n=500, d=2, seed=3)

    def run(plain: bool) -> tuple[list[tuple[int, int, float]], list[tuple[int, str | None]]]:
        with monkeypatch.context() as patch:
            if plain:
                patch.setattr("service.engine.strategy.LazyUCB", _PlainLazyUCB)
                patch.setattr("service.engine.strategy.LocalRule", _PlainLocalRule)
                patch.setattr("service.engine.rules.LocalRule", _PlainLocalRule)
            strategy = Strategy(X, stopping_rule=rule, explore=0.5, seed=2)
            out = []
            for _ in range(6):
                selections = strategy.ask(120)
                for sel in selections[::2]:
                    strategy.tell(sel.t, float(f[sel.arm]))
                out += [(s.arm, s.batch, s.variance) for s in selections]
            return out, [(b.size, b.stop_reason) for b in strategy.batches]

    assert run(plain=False) == run(plain=True)
