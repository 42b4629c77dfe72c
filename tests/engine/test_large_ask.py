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
TERM = 600 * 8  # bytes of one arm's term at A = 600 (_posterior)


def _lru_misses(arms: list[int], capacity: int) -> tuple[list[bool], list[list[int]]]:
    """Per add: whether a least-recently-used cache of ``capacity`` arms misses; and the arms
    it holds afterwards, least recently used first."""
    held: list[int] = []
    misses, contents = [], []
    for arm in arms:
        misses.append(arm not in held)
        if arm in held:
            held.remove(arm)
        elif len(held) >= capacity:
            held.pop(0)
        held.append(arm)
        contents.append(list(held))
    return misses, contents


@pytest.mark.parametrize(("cache_bytes", "capacity"), [(ROOMY, 3), (0, 1), (2 * TERM, 2),
                                                       (3 * TERM - 1, 2), (3 * TERM, 3)])
def test_local_rule_terms_stay_within_the_budget_and_add_up_identically(cache_bytes, capacity,
                                                                        monkeypatch):
    """The kept terms never exceed the budget (one arm's term at least), the least recently
    used is evicted first, a covariance column is computed exactly on a miss, and the ratio
    equals the uncached form's bit for bit after every add, evictions included."""
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
    misses, contents = _lru_misses(arms, capacity)
    if capacity < 3:
        assert sum(misses) > 3  # the sequence does evict (and re-compute) at this budget
    for step, arm in enumerate(arms):
        calls.clear()
        rule.add(arm)
        assert calls == ([arm] if misses[step] else []), step
        assert list(rule._terms) == contents[step], step
        kept = sum(term.nbytes for term in rule._terms.values())
        assert kept <= max(cache_bytes, TERM) and len(rule._terms) <= capacity, step
        plain.add(arm)
        np.testing.assert_array_equal(rule.ratio, plain.ratio)
    closed = next((step for step in range(10_000) if rule.closes(7) is not None), None)
    assert closed is not None and not rule._terms  # the batch closing frees the terms


class _WatchedLocalRule(LocalRule):
    """The engine's local rule, counting its cache hits and evictions and checking, at every
    add, that the kept terms stay within ``cache_bytes`` (one arm's term at least)."""

    hits = evictions = 0

    def add(self, arm: int) -> None:
        full = len(self._terms) >= max(1, self.cache_bytes // max(self.ratio.nbytes, 1))
        if arm in self._terms:
            _WatchedLocalRule.hits += 1
        elif full:
            _WatchedLocalRule.evictions += 1
        super().add(arm)
        kept = sum(term.nbytes for term in self._terms.values())
        assert kept <= max(self.cache_bytes, self.ratio.nbytes)


@pytest.mark.parametrize(("rule", "cache_bytes"), [("local", ROOMY), ("combined", ROOMY),
                                                   ("local", 2 * 500 * 8), ("combined", 0)])
def test_strategies_with_the_plain_components_propose_the_same_arms(rule, cache_bytes,
                                                                    monkeypatch):
    """Whole runs (several batches, UCB settling on repeated arms) with the plain selector and
    rule in place of the engine's: identical selections and batch boundaries, also when the
    local rule's budget holds one or two arms' terms and evicts all along."""
    X, f = smooth_problem(n=500, d=2, seed=3)
    monkeypatch.setattr(LocalRule, "cache_bytes", cache_bytes)
    monkeypatch.setattr(_WatchedLocalRule, "hits", 0)
    monkeypatch.setattr(_WatchedLocalRule, "evictions", 0)

    def run(plain: bool) -> tuple[list[tuple[int, int, float]], list[tuple[int, str | None]]]:
        with monkeypatch.context() as patch:
            local = _PlainLocalRule if plain else _WatchedLocalRule
            if plain:
                patch.setattr("service.engine.strategy.LazyUCB", _PlainLazyUCB)
            patch.setattr("service.engine.strategy.LocalRule", local)
            patch.setattr("service.engine.rules.LocalRule", local)
            strategy = Strategy(X, stopping_rule=rule, explore=0.5, seed=2)
            out = []
            for _ in range(6):
                selections = strategy.ask(120)
                for sel in selections[::2]:
                    strategy.tell(sel.t, float(f[sel.arm]))
                out += [(s.arm, s.batch, s.variance) for s in selections]
            return out, [(b.size, b.stop_reason) for b in strategy.batches]

    assert run(plain=False) == run(plain=True)
    assert _WatchedLocalRule.hits > 0  # the kept terms were used...
    if cache_bytes != ROOMY:
        assert _WatchedLocalRule.evictions > 0  # ...and, on a small budget, evicted
