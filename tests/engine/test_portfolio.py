"""The floor's portfolio: the bandit over multiples of the neighbour floor (portfolio.py), alone
and in the engine (a sparse 20-d candidate set, where the kernel starts on the floor)."""

from __future__ import annotations

import numpy as np
import pytest

from service.engine import EngineConfig, Strategy
from service.engine import portfolio as portfolio_module
from service.engine.autokernel import KernelState
from service.engine.errors import ConfigError
from service.engine.portfolio import (
    FLOOR_EXPLORATION,
    FLOOR_FACTORS,
    FloorPortfolio,
    first_portfolio,
    next_portfolio,
    rank_quantiles,
)

from .replay import assert_same_proposals, random_history


def test_rank_quantiles_are_scale_free_and_count_ties_half():
    among = np.array([3.0, 1.0, 2.0, 2.0, 10.0])
    assert rank_quantiles(np.array([1.0, 2.0, 10.0]), among).tolist() == [0.1, 0.4, 0.9]
    # any increasing map of the values leaves the rewards as they were
    np.testing.assert_array_equal(rank_quantiles(np.exp(among[:2]), np.exp(among)),
                                  rank_quantiles(among[:2], among))


def test_each_factor_is_tried_once_then_ucb1_decides():
    start = first_portfolio()
    assert start.factor == FLOOR_FACTORS[0] and start.observations == (0,) * len(FLOOR_FACTORS)
    # a batch without values (all abandoned) is not a try: the same factor again
    assert next_portfolio(start, np.zeros(0)).index == 0
    second = next_portfolio(start, np.array([0.2, 0.4]))
    assert second.index == 1 and second.observations[0] == 2
    assert second.rewards[0] == pytest.approx(0.6)
    # factor 1 draws better values: UCB1's index is mean + c sqrt(log n / n_i)
    third = next_portfolio(second, np.array([0.9, 0.8]))
    assert third.index == 1 and third.observations == (2, 2)
    # with far more observations behind factor 1 and a tie in means, the bonus favours 0
    tied = FloorPortfolio(1, (5, 50), (2.5, 25.0), FLOOR_FACTORS)
    assert next_portfolio(tied, np.array([0.5])).index == 0
    n = np.array([5, 51])
    bonus = FLOOR_EXPLORATION * np.sqrt(np.log(n.sum()) / n)
    assert bonus[0] > bonus[1]


def test_a_portfolio_of_other_factors_starts_again():
    stored = FloorPortfolio(1, (3, 4), (1.0, 2.0), (1.0, 3.0))
    assert next_portfolio(stored, np.array([0.5])) == first_portfolio()


def test_kernel_state_round_trip_and_malformed_portfolios():
    portfolio = FloorPortfolio(1, (4, 6), (1.5, 4.0), FLOOR_FACTORS)
    state = KernelState((2.0 * 3.0,), 1.0, source="floor", portfolio=portfolio)
    assert KernelState.from_dict(state.to_dict()) == state
    assert state.base.lengthscale == (3.0,) and state.base.portfolio == portfolio
    # states stored before the portfolio parse as without one
    old = {k: v for k, v in state.to_dict().items() if k != "portfolio"}
    assert KernelState.from_dict(old).portfolio is None
    for bad in ({"factor": 3.0}, {"observations": [4]}, {"rewards": [5.0, 4.0]},
                {"observations": [-1, 6]}, {"factors": [0.0, 2.0], "factor": 2.0}):
        with pytest.raises(ConfigError, match="malformed stored hyper-parameters"):
            KernelState.from_dict({**state.to_dict(),
                                   "portfolio": {**portfolio.to_dict(), **bad}})
    with pytest.raises(ConfigError, match="portfolio must be an object"):
        KernelState.from_dict({**state.to_dict(), "portfolio": [1, 2]})


@pytest.fixture
def early_portfolio(monkeypatch):  # type: ignore[no-untyped-def]
    """The portfolio from the 20th value on (300 by default): short runs reach it."""
    monkeypatch.setattr(portfolio_module, "FLOOR_PORTFOLIO_OBSERVATIONS", 20)


def _sparse_problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """300 uniform candidates in 20 d (the floor exceeds half the RMS distance: the kernel
    starts on it, :data:`autokernel.FLOOR_START_RATIO`) and values in [0, 1] without a
    structure a fit would keep, so the kernel stays on the floor."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, size=(300, 20)), rng.random(300)


def _run(strategy: Strategy, f: np.ndarray, steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    while strategy.t < steps:
        for sel in strategy.ask(4):
            strategy.tell(sel.t, float(f[sel.arm] + 0.01 * rng.standard_normal()))


def test_on_the_floor_each_batch_runs_on_a_multiple_of_it_and_credits_its_values(
        early_portfolio):
    X, f = _sparse_problem()
    strategy = Strategy(X, EngineConfig(strategy="bbkb", noise=0.01, seed=3, mode="sync"))
    _run(strategy, f, 300)
    floor = strategy._neighbour_lengthscale()
    states = [KernelState.from_dict(b.hyperparameters) for b in strategy.batches]
    # before 20 values the floor itself, then the portfolio's multiple of it
    starts = [b.start for b in strategy.batches]
    observed = [int(np.sum(strategy.records["status"][:t] == 1)) for t in starts]
    on_floor = [s for s, n in zip(states, observed, strict=True) if s.source == "floor"]
    assert all((s.portfolio is None) == (n < 20) for s, n in zip(states, observed, strict=True)
               if s.source == "floor")
    on_floor = [s for s in on_floor if s.portfolio is not None]
    assert len(on_floor) >= 10
    assert all(s.portfolio is None for s in states if s.source != "floor")
    for state in on_floor:  # the rules' state is the floor; the batch runs on its multiple
        assert state.base.lengthscale == pytest.approx((floor,))
        assert state.lengthscale == pytest.approx((state.portfolio.factor * floor,))
    assert {s.portfolio.factor for s in on_floor} == set(FLOOR_FACTORS)
    # each opening credits the previous batch's values (sync: all of them) to its factor
    for b in range(1, len(states)):
        last, now = states[b - 1].portfolio, states[b].portfolio
        if last is None or now is None or last.factors != now.factors:
            continue
        size = strategy.batches[b - 1].size
        gained = np.subtract(now.observations, last.observations)
        assert gained[last.index] == size and gained.sum() == size
        assert 0 < now.rewards[last.index] - last.rewards[last.index] < size or size == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("strategy", ["bbkb", "bkb", "thompson"])
def test_a_restore_on_the_floor_proposes_what_the_live_strategy_would(strategy, mode,
                                                                    early_portfolio):
    X, f = _sparse_problem(seed=1)
    cfg = EngineConfig(strategy=strategy, noise=0.01, seed=7, mode=mode, batch_size=3)
    live = Strategy(X, cfg)
    rng = np.random.default_rng(4)
    for sel in random_history(live, f, rng, steps=120):  # past the portfolio's start
        live.tell(sel.t, float(f[sel.arm]))
    for _ in range(3):
        pending = random_history(live, f, rng, steps=40)
        assert live.hyperparameters.portfolio is not None
        restored = Strategy.restore(X, cfg, live.state())
        assert restored.hyperparameters == live.hyperparameters
        assert_same_proposals(live, restored, pending, f)
    factors = {b.hyperparameters["portfolio"]["factor"] for b in live.batches
               if b.hyperparameters["portfolio"] is not None}
    assert factors == set(FLOOR_FACTORS)


def test_the_exact_gp_strategies_and_fixed_kernels_have_no_portfolio(early_portfolio):
    X, f = _sparse_problem()
    for cfg in (EngineConfig(strategy="gp-bucb", noise=0.01, seed=1),
                EngineConfig(strategy="bbkb", noise=0.01, seed=1,
                             kernel={"name": "rbf", "lengthscale": 3.0})):
        strategy = Strategy(X, cfg)
        _run(strategy, f, 60)
        assert all(b.hyperparameters["portfolio"] is None for b in strategy.batches)
