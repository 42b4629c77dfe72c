"""The ask/tell surface: sync and async semantics, idempotence, and errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import CandidateError, ConfigError, EngineConfig, SelectionError, Strategy

from .helpers import smooth_problem


def _strategy(**kw) -> tuple[Strategy, np.ndarray]:
    X, f = smooth_problem(n=200)
    return Strategy(X, **({"kernel": {"name": "rbf", "lengthscale": 0.3}} | kw)), f


def test_sync_mode_waits_for_every_result_of_a_closed_batch():
    strategy, f = _strategy(mode="sync")
    first = strategy.ask(10)
    assert len(first) == 1  # the initial design is one uniform point, then the batch closes
    assert strategy.ask(5) == [] and "waiting for 1 pending" in strategy.waiting
    strategy.tell(first[0].t, f[first[0].arm])
    assert strategy.waiting is None
    assert len(strategy.ask(1)) == 1


def test_async_mode_never_leaves_a_worker_idle():
    strategy, _ = _strategy(mode="async")
    handed = strategy.ask(50)
    assert len(handed) == 50 and strategy.waiting is None
    assert len({s.batch for s in handed}) > 1  # batches closed and reopened without feedback
    assert len({s.t for s in handed}) == 50


@pytest.mark.parametrize("strategy_name", ["bbkb", "gp-ucb", "go-ucb"])
def test_an_ask_out_of_time_hands_out_what_it_has_and_the_next_goes_on(strategy_name):
    """``seconds``: an ask stops making selections once its time is up (one at least), and the
    asks that follow make the selections one ask would have made."""
    X, _ = smooth_problem(n=200)
    config = {"mode": "async", "strategy": strategy_name, "seed": 3}
    timed, whole = Strategy(X, config), Strategy(X, config)
    pieces = [timed.ask(4, seconds=0.0) for _ in range(12)]
    assert [len(piece) for piece in pieces] == [1] * 12
    assert [s.arm for piece in pieces for s in piece] == [s.arm for s in whole.ask(12)]
    assert len(timed.ask(12, seconds=None)) == 12


def test_async_mean_uses_only_feedback_that_arrived_before_the_batch_opened():
    strategy, f = _strategy(mode="async", strategy="bkb")
    a, b = strategy.ask(2)
    strategy.tell(a.t, 5.0)  # b stays pending
    strategy.ask(1)  # opens a new batch: a is folded in, b is not
    records = strategy.records
    assert records["folded"][a.t] >= 0 and records["folded"][b.t] == -1
    mean, _ = strategy.predict()
    assert mean.max() > 0.5  # the observed 5.0 moved the mean


def test_feedback_may_arrive_late_and_out_of_order():
    strategy, f = _strategy(mode="async", strategy="bbkb")
    handed = strategy.ask(20)
    for sel in reversed(handed):
        strategy.tell(sel.t, f[sel.arm])
    batch = strategy.batch
    while strategy.batch == batch:  # folding happens when the next batch opens
        strategy.ask(1)
    assert np.all(strategy.records["folded"][: len(handed)] >= 0)


def test_tell_is_idempotent_and_refuses_a_conflicting_value():
    strategy, _ = _strategy()
    (sel,) = strategy.ask(1)
    strategy.tell(sel.t, 0.5)
    strategy.tell(sel.t, 0.5)
    with pytest.raises(SelectionError, match="refusing a different value"):
        strategy.tell(sel.t, 0.6)


def test_abandoned_selection_releases_a_sync_batch_and_leaves_the_model():
    strategy, f = _strategy(mode="sync", strategy="bkb")
    (first,) = strategy.ask(1)
    strategy.tell(first.t, f[first.arm])
    (second,) = strategy.ask(1)
    assert strategy.ask(1) == []
    strategy.abandon(second.t)
    strategy.abandon(second.t)  # idempotent
    assert len(strategy.ask(1)) == 1
    assert second.arm not in strategy.dictionary or second.arm == first.arm
    with pytest.raises(SelectionError, match="abandoned"):
        strategy.tell(second.t, 1.0)


def test_abandoning_an_observed_selection_is_refused():
    strategy, _ = _strategy()
    (sel,) = strategy.ask(1)
    strategy.tell(sel.t, 1.0)
    with pytest.raises(SelectionError, match="already has a value"):
        strategy.abandon(sel.t)


@pytest.mark.parametrize("t", [-1, 5, 1.5, "0", True])
def test_unknown_selection_is_named(t):
    strategy, _ = _strategy()
    strategy.ask(1)
    with pytest.raises(SelectionError, match="unknown selection") as info:
        strategy.tell(t, 1.0)
    assert info.value.field == "t"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "abc", None])
def test_non_finite_or_non_numeric_values_are_refused(value):
    strategy, _ = _strategy()
    (sel,) = strategy.ask(1)
    with pytest.raises(SelectionError) as info:
        strategy.tell(sel.t, value)
    assert info.value.field == "value"


@pytest.mark.parametrize("arm", [-1, 200, 2.0, True])
def test_import_of_an_unknown_candidate_is_refused(arm):
    strategy, _ = _strategy()
    with pytest.raises(SelectionError, match="unknown candidate index"):
        strategy.observe(arm, 1.0)


@pytest.mark.parametrize("count", [0, -2, 1.5, True])
def test_bad_ask_count(count):
    strategy, _ = _strategy()
    with pytest.raises(SelectionError, match="count"):
        strategy.ask(count)


@pytest.mark.parametrize(
    "candidates, message",
    [
        (np.zeros((0, 3)), "empty"),
        (np.zeros((4, 0)), "empty"),
        (np.zeros(5), "2-D"),
        (np.array([[0.0, np.nan]]), "NaN or inf .*row 0, column 1"),
        (np.array([[np.inf, 1.0]]), "NaN or inf"),
        ([["a", "b"]], "numeric"),
    ],
)
def test_bad_candidates_are_named(candidates, message):
    with pytest.raises(CandidateError, match=message):
        Strategy(candidates)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"batch_threshold": 1.0}, "batch_threshold"),
        ({"batch_threshold": 0.5}, "batch_threshold"),
        ({"lam": 0.0}, "lam"),
        ({"lam": -1.0}, "lam"),
        ({"lam": float("nan")}, "lam"),
        ({"kernel": {"name": "rbf", "lengthscale": 0.0}}, "kernel.lengthscale"),
        ({"kernel": {"name": "rbf", "lengthscale": -2.0}}, "kernel.lengthscale"),
        ({"kernel": {"name": "cosine"}}, "kernel.name"),
        ({"kernel": {"name": "rbf", "width": 1.0}}, "kernel"),
        ({"strategy": "gp-magic"}, "strategy"),
        ({"stopping_rule": "sometimes"}, "stopping_rule"),
        ({"mode": "later"}, "mode"),
        ({"delta": 1.5}, "delta"),
        ({"oversampling": 0.0}, "oversampling"),
        ({"batch_size": 0}, "batch_size"),
        ({"min_parallelism": 0}, "min_parallelism"),
        ({"seed": -1}, "seed"),
        ({"epsilon": 2.0}, "epsilon"),
        ({"kernel": {"name": "rbf", "lengthscale": True}}, "kernel.lengthscale"),
        ({"kernel": {"name": "rbf", "lengthscale": "2"}}, "kernel.lengthscale"),
    ],
)
def test_bad_configuration_names_the_field(changes, field):
    with pytest.raises(ConfigError) as info:
        EngineConfig(**changes)
    assert info.value.field == field


def test_config_round_trips_through_a_plain_dictionary():
    cfg = EngineConfig(strategy="gp-bucb", kernel={"name": "matern52", "lengthscale": 2.0},
                       lam=0.3, seed=9)
    again = EngineConfig.from_dict(cfg.to_dict())
    assert again == cfg
    with pytest.raises(ConfigError, match=r"unknown configuration keys \['bandwidth'\]; the "
                                          r"keys are \[.*'kernel'.*'lam'"):
        EngineConfig.from_dict({"strategy": "bbkb", "bandwidth": 3})


@pytest.mark.parametrize("strategy, default", [("bbkb", 0.1), ("gp-ucb", 0.1), ("thompson", 0.1),
                                               ("gssbo", 1.0), ("go-ucb", 1.0)])
def test_explore_defaults_per_strategy_and_is_stored_resolved(strategy, default):
    cfg = EngineConfig(strategy=strategy)
    assert cfg.explore == default and cfg.to_dict()["explore"] == default
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    assert EngineConfig(strategy=strategy, explore=0.5).explore == 0.5  # a given value stays
    with pytest.raises(ConfigError) as info:
        EngineConfig(strategy=strategy, explore=-1.0)
    assert info.value.field == "explore"


def test_same_seed_same_run_different_seed_different_run():
    X, f = smooth_problem(n=300)

    def arms(seed: int) -> list[int]:
        s = Strategy(X, strategy="thompson", batch_size=5, seed=seed,
                     kernel={"name": "rbf", "lengthscale": 0.3})
        out = []
        for _ in range(6):
            for sel in s.ask(5):
                s.tell(sel.t, f[sel.arm])
                out.append(sel.arm)
        return out

    assert arms(1) == arms(1)
    assert arms(1) != arms(2)


def test_resolved_counts_suggested_selections_with_an_outcome():
    X = np.random.default_rng(0).random((30, 2))
    strategy = Strategy(X, strategy="uniform", batch_size=4, seed=1)
    selections = strategy.ask(4)
    strategy.observe(3, 0.5)  # an import is not a suggestion
    assert strategy.resolved() == 0
    strategy.tell(selections[0].t, 1.0)
    strategy.abandon(selections[2].t)
    assert strategy.resolved() == 2
    strategy.tell(selections[0].t, 1.0)  # idempotent
    assert strategy.resolved() == 2


@pytest.mark.parametrize("strategy_name", ["bbkb", "gp-bucb", "thompson", "epsilon-greedy",
                                           "uniform"])
def test_a_candidate_that_failed_for_good_is_not_proposed_again(strategy_name):
    X, f = smooth_problem(n=40, d=2, seed=5)
    strategy = Strategy(X, strategy=strategy_name, kernel={"name": "rbf", "lengthscale": 0.3},
                        mode="sync", batch_size=5, epsilon=0.5, seed=2, explore=1.0)
    failed: set[int] = set()
    for _ in range(12):
        batch = strategy.ask_batch()
        assert not {s.arm for s in batch} & failed  # opened after the failures were known
        for s in batch:
            if len(failed) < 8 and s.arm not in failed and s.arm % 3 == 0:
                strategy.abandon(s.t)  # e.g. the objective crashes on this candidate
                failed.add(s.arm)
            else:
                strategy.tell(s.t, float(f[s.arm]))
    assert failed  # the test did exercise failures
    rebuilt = Strategy.restore(X, strategy.config, strategy.state())
    assert rebuilt.ask_batch() == strategy.ask_batch()


def test_when_every_candidate_failed_asking_says_so():
    X = np.random.default_rng(0).random((3, 2))
    strategy = Strategy(X, strategy="uniform", mode="sync", batch_size=3, seed=0)
    for _ in range(10):
        for s in strategy.ask_batch():
            strategy.abandon(s.t)
        if strategy.resolved() and len({int(a) for a in strategy.records["arm"]}) == 3:
            break
    with pytest.raises(SelectionError, match="every candidate has failed"):
        strategy.ask_batch()
