"""Rebuilding from (config, candidates, state) proposes exactly what the live object would."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import EngineConfig, Strategy

from .helpers import smooth_problem

CONFIGS = [
    dict(strategy="bbkb", stopping_rule="global"),
    dict(strategy="bbkb", stopping_rule="local"),
    dict(strategy="bbkb", stopping_rule="combined", min_parallelism=4),
    dict(strategy="bkb"),
    dict(strategy="gp-ucb"),
    dict(strategy="gp-bucb"),
    dict(strategy="thompson", batch_size=5),
    dict(strategy="epsilon-greedy", batch_size=5, epsilon=0.3),
    dict(strategy="uniform", batch_size=5),
    # no candidate twice: the blocked mask grows inside a batch (selections, imports)
    dict(strategy="bbkb", stopping_rule="global", deterministic=True),
    dict(strategy="gp-bucb", deterministic=True),
    dict(strategy="thompson", batch_size=5, deterministic=True),
    dict(strategy="epsilon-greedy", batch_size=5, epsilon=0.3, deterministic=True),
    dict(strategy="uniform", batch_size=5, deterministic=True),
]


def _drive(strategy: Strategy, f: np.ndarray, rng: np.random.Generator, steps: int,
           pending: list) -> None:
    """Random interleaving of asks, late and out-of-order tells, abandonments and imports."""
    for _ in range(steps):
        action = rng.random()
        if action < 0.5:
            pending.extend(strategy.ask(int(rng.integers(1, 4))))
        elif action < 0.85 and pending:
            sel = pending.pop(int(rng.integers(len(pending))))
            strategy.tell(sel.t, f[sel.arm] + 0.01 * rng.standard_normal())
        elif action < 0.92 and pending:
            strategy.abandon(pending.pop(int(rng.integers(len(pending)))).t)
        else:
            arm = int(rng.integers(strategy.n_arms))
            strategy.observe(arm, f[arm])


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_restore_mid_run_proposes_the_same_candidates(config, mode):
    X, f = smooth_problem(n=250, d=2, seed=11)
    f = 40.0 * f - 15.0  # outside [0, 1]: each batch maps them (a restore recomputes it)
    cfg = EngineConfig(kernel={"name": "rbf", "lengthscale": 0.25}, lam=0.5, seed=5, mode=mode,
                       **config)
    live = Strategy(X, cfg)
    rng = np.random.default_rng(12)
    pending: list = []
    for _ in range(4):
        _drive(live, f, rng, 40, pending)
        restored = Strategy.restore(X, cfg, live.state())
        assert restored.replay_mismatches == 0
        assert restored.batch == live.batch and restored.batch_closed == live.batch_closed
        np.testing.assert_array_equal(restored.dictionary, live.dictionary)
        # from here on both receive the same feedback and must propose the same arms
        noise_seed = int(rng.integers(1 << 30))
        for strategy in (live, restored):
            local_rng = np.random.default_rng(noise_seed)
            for sel in pending:  # results of the pending selections arrive (sync needs them)
                strategy.tell(sel.t, f[sel.arm] + 0.01 * local_rng.standard_normal())
            proposals = []
            for _ in range(3):
                batch = strategy.ask(4)
                proposals.append([(s.t, s.arm, s.batch) for s in batch])
                for sel in batch:
                    strategy.tell(sel.t, f[sel.arm] + 0.01 * local_rng.standard_normal())
            if strategy is live:
                expected = proposals
        pending.clear()
        assert proposals == expected
        assert sum(map(len, proposals)) > 0
        np.testing.assert_array_equal(restored.records["value"], live.records["value"])


@pytest.mark.parametrize("strategy", ["gp-ucb", "gp-bucb"])
def test_restore_with_results_still_pending_proposes_the_same(strategy, monkeypatch):
    """Async exact GP: the restored copy asks while selections are still pending, so that its
    means come from the block formula over them (ExactPosterior._subset_mean), as the live
    one's do; both must propose the same arms through out-of-order results."""
    from service.engine import exact

    calls = []
    block = exact.ExactPosterior._subset_mean
    monkeypatch.setattr(exact.ExactPosterior, "_subset_mean",
                        lambda self, *a: calls.append(1) or block(self, *a))
    X, f = smooth_problem(n=250, d=2, seed=11)
    cfg = EngineConfig(kernel={"name": "rbf", "lengthscale": 0.25}, lam=0.5, seed=5,
                       mode="async", strategy=strategy)
    live, rng, pending = Strategy(X, cfg), np.random.default_rng(3), []
    for _ in range(60):
        pending += live.ask(1)
        if len(pending) > 4:
            sel = pending.pop(int(rng.integers(len(pending))))
            live.tell(sel.t, float(f[sel.arm]))
    restored = Strategy.restore(X, cfg, live.state())
    for _ in range(30):  # both keep 4-5 selections pending, results in a random order
        asked = [s.ask(1) for s in (live, restored)]
        assert asked[0] == asked[1] and asked[0]
        pending += asked[0]
        sel = pending.pop(int(rng.integers(len(pending))))
        for s in (live, restored):
            s.tell(sel.t, float(f[sel.arm]))
    assert calls  # the block formula ran


def test_restore_before_any_ask_and_with_only_imports():
    X, f = smooth_problem(n=100)
    cfg = EngineConfig(kernel={"name": "rbf", "lengthscale": 0.3})
    live = Strategy(X, cfg)
    assert Strategy.restore(X, cfg, live.state()).ask(3) == live.ask(3)
    fresh = Strategy(X, cfg)
    for arm in range(0, 100, 9):
        fresh.observe(arm, f[arm])
    restored = Strategy.restore(X, cfg, fresh.state())
    assert restored.ask(5) == fresh.ask(5)


def test_state_is_independent_of_the_live_object():
    X, f = smooth_problem(n=100)
    live = Strategy(X, kernel={"name": "rbf", "lengthscale": 0.3}, mode="sync")
    sel = live.ask_batch()
    state = live.state()
    live.tell(sel[0].t, 1.0)
    assert np.isnan(state.records["value"][0])


def test_restore_rejects_a_history_outside_the_candidate_set():
    X, _ = smooth_problem(n=100)
    live = Strategy(X)
    live.ask(2)
    with pytest.raises(ValueError, match="outside the candidate set"):
        Strategy.restore(X[:1], live.config, live.state())


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_catch_up_equals_the_live_object_inside_a_batch_and_refuses_across_one(config, mode):
    """A stale copy (another api process's cache) given the records the live object added or
    resolved since becomes the live object, as long as no batch opened in between."""
    X, f = smooth_problem(n=250, d=2, seed=11)
    cfg = EngineConfig(kernel={"name": "rbf", "lengthscale": 0.25}, lam=0.5, seed=5, mode=mode,
                       **config)
    live = Strategy(X, cfg)
    rng = np.random.default_rng(3)
    pending: list = []

    def catch_up(stale: Strategy) -> bool:
        records = live.records
        t = np.arange(len(records["arm"]))
        wanted = (t >= stale.t) | np.isin(t, stale.pending())
        return stale.catch_up(t[wanted], {k: v[wanted] for k, v in records.items()}, live.batch)

    stale = Strategy(X, cfg)
    pending.extend(live.ask(2))
    assert not catch_up(stale)  # the first batch opened: rebuild
    caught = 0
    for _ in range(30):
        _drive(live, f, rng, int(rng.integers(1, 4)), pending)
        stale = Strategy.restore(X, cfg, live.state())
        before = live.batch
        _drive(live, f, rng, int(rng.integers(1, 4)), pending)
        done = catch_up(stale)
        if live.batch != before:
            assert not done
            continue
        assert done
        caught += 1
        for name, column in stale.records.items():
            np.testing.assert_array_equal(column, live.records[name], err_msg=name)
        assert stale.batch_closed == live.batch_closed and stale.waiting == live.waiting
        twin = Strategy.restore(X, cfg, live.state())  # from here on all three propose alike
        selections = [strategy.ask(3) for strategy in (live, stale, twin)]
        assert [[(s.t, s.arm) for s in batch] for batch in selections[1:]] == 2 * [
            [(s.t, s.arm) for s in selections[0]]]
        pending.extend(selections[0])
    assert caught > 0
