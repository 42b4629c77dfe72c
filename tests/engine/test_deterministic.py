"""``deterministic``: no candidate is proposed twice, by any strategy, in either mode, and asking
past the last candidate says so."""

from __future__ import annotations

import pytest

from service.engine import ConfigError, EngineConfig, SelectionError, Strategy

from .helpers import smooth_problem

FIXED = {"kernel": {"name": "rbf", "lengthscale": 0.3}}
CONFIGS = [
    dict(strategy="bbkb", **FIXED),
    dict(strategy="bbkb"),  # the automatic kernel: its phase before the first fit blocks too
    dict(strategy="bbkb", min_parallelism=8, **FIXED),  # Alg. 3's design repeats arms
    dict(strategy="bkb", **FIXED),
    dict(strategy="gp-ucb", **FIXED),
    dict(strategy="gp-bucb", **FIXED),
    dict(strategy="thompson", batch_size=4, **FIXED),
    dict(strategy="epsilon-greedy", batch_size=4, epsilon=0.5, **FIXED),
    dict(strategy="uniform", batch_size=4),
    dict(strategy="gssbo", gssbo_initial=5, gssbo_buffer=20),
    dict(strategy="go-ucb", horizon=16, goucb_hidden=4),
]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(
    str(v) for k, v in c.items() if k != "kernel"))
def test_every_candidate_once_then_a_clear_error(config, mode):
    X, f = smooth_problem(n=40, d=2, seed=3)
    strategy = Strategy(X, EngineConfig(seed=1, mode=mode, deterministic=True, **config))
    for arm in (0, 7):  # imported before the first ask: never proposed
        strategy.observe(arm, float(f[arm]))
    proposed: list[int] = []
    while not strategy.exhausted:
        handed = strategy.ask(3)
        assert handed, strategy.waiting  # every result is told at once: sync never waits
        for selection in handed:
            strategy.tell(selection.t, float(f[selection.arm]))
        proposed += [s.arm for s in handed]
    assert sorted(proposed + [0, 7]) == list(range(40))
    with pytest.raises(SelectionError, match="every one of the 40 candidates") as error:
        strategy.ask(1)
    assert error.value.field == "candidates"
    with pytest.raises(SelectionError, match="proposes none twice"):
        strategy.ask_batch()


def test_an_ask_past_the_end_hands_out_what_is_left():
    X, f = smooth_problem(n=10, d=2)
    strategy = Strategy(X, strategy="uniform", batch_size=3, mode="async", deterministic=True)
    sizes = [len(strategy.ask(4)) for _ in range(3)]
    assert sizes == [4, 4, 2] and strategy.exhausted
    assert len(set(strategy.records["arm"].tolist())) == 10


@pytest.mark.parametrize("config", [
    dict(strategy="thompson", **FIXED), dict(strategy="epsilon-greedy", epsilon=0.5, **FIXED),
    dict(strategy="uniform"), dict(strategy="gssbo", batch_rule="fixed", gssbo_initial=5)],
    ids=lambda c: c["strategy"])
def test_an_import_inside_a_batch_is_not_proposed_after_it(config):
    X, f = smooth_problem(n=60, d=2, seed=4)
    strategy = Strategy(X, mode="async", deterministic=True, seed=2, batch_size=30, **config)
    for selection in strategy.ask(12):
        strategy.tell(selection.t, float(f[selection.arm]))
    assert not strategy.batch_closed  # the imports below land inside an open batch
    imported = sorted(set(range(60)) - set(strategy.records["arm"].tolist()))[:10]
    for arm in imported:
        strategy.observe(arm, float(f[arm]))
    before = set(strategy.records["arm"].tolist())
    later = [s.arm for s in strategy.ask(60)]  # more than are left: the rest, each once
    assert len(later) == len(set(later)) == 60 - len(before)
    assert not set(later) & before


@pytest.mark.parametrize("config", [
    dict(strategy="bbkb", min_parallelism=8, **FIXED), dict(strategy="gssbo", gssbo_initial=8),
    dict(strategy="go-ucb", horizon=64, goucb_hidden=4)], ids=lambda c: c["strategy"])
def test_an_import_of_a_design_arm_is_not_proposed_after_it(config):
    X, f = smooth_problem(n=60, d=2, seed=6)
    strategy = Strategy(X, mode="sync", deterministic=True, seed=2, **config)
    first = strategy.ask(1)
    design = strategy._selector.arms  # the initial design the batch hands out in order
    later = [a for a in design if a != first[0].arm][:3]
    for arm in later:  # imported while the design batch is open
        strategy.observe(arm, float(f[arm]))
    rest = [s.arm for s in strategy.ask_batch()]
    arms = [first[0].arm, *rest]
    assert len(arms) == len(set(arms)) and not set(arms) & set(later)


def test_the_default_repeats_its_best_arm_and_deterministic_does_not():
    """What the option is for: noiseless values, where the default (a bandit's protocol)
    evaluates its incumbent again and again."""
    X, f = smooth_problem(n=300, d=2, seed=5)
    runs = {}
    for deterministic in (False, True):
        strategy = Strategy(X, strategy="bbkb", mode="async", seed=0,
                            deterministic=deterministic)
        for _ in range(120):
            (selection,) = strategy.ask(1)
            strategy.tell(selection.t, float(f[selection.arm]))
        runs[deterministic] = strategy.records["arm"]
    assert len(set(runs[False].tolist())) < 60  # the default's repeats (here 20 distinct)
    assert len(set(runs[True].tolist())) == 120


def test_deterministic_is_a_boolean():
    with pytest.raises(ConfigError, match="deterministic must be true or false") as error:
        EngineConfig(deterministic="yes")
    assert error.value.field == "deterministic"
    assert EngineConfig.from_dict({}).deterministic is False  # stored configs: as before
