"""The floor's portfolio: which multiple of the neighbour floor a batch runs on while no fit
has placed the kernel (``source: floor``).

On the floor the kernel is a prior choice, and in 20 and more dimensions the bandwidth with the
least regret can lie a factor 2 above it (Powell-52 with its optimum moved: 16 against a floor of
8.7), where the likelihood of the run's own arms points shorter still. The values are the one
signal left: each batch opening on the floor runs its batch on ``factor x floor`` for a factor of
:data:`FLOOR_FACTORS`, chosen by UCB1 (Auer et al., 2002) on the values its batches drew, each
scored by its rank quantile among all values observed so far (scale-free, in (0, 1)). The
regret the engine is judged by is the cumulative one, which is what a bandit over the factors
minimises; its factors share one data set, so a batch's reward also reflects what the others'
batches taught the model (benchmarks/floor_portfolio.py has the measurements and the variants
tried: shorter factors trapped Styblinski-Tang-20, a fixed alternation all of them).

A batch is credited once, at the next opening, with those of its values that have arrived by
then (all of them in ``sync`` mode; in ``async`` mode later ones are not credited), so the
statistics persisted with each batch (:class:`FloorPortfolio`) are all a restore needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The multiples of the neighbour floor a batch on the floor may run on: the floor is the
#: shortest bandwidth at which UCB learns between neighbouring candidates
#: (:data:`autokernel.NEIGHBOUR_CORRELATION`), so the portfolio only goes above it; 0.75 and 0.5
#: as well found the centred Rastrigins' short optimum, but trapped Styblinski-Tang-20 and
#: Powell-52 (UCB at a short bandwidth repeats the incumbent, whose ranks are high).
FLOOR_FACTORS: tuple[float, ...] = (1.0, 2.0)
#: The portfolio starts once this many values are observed on the floor: earlier, the exact fits
#: (:data:`strategy.EXACT_FIT_ARMS`) may still place the kernel, and batches at twice the floor,
#: clustered near the incumbent, got early fits kept that trapped Styblinski-Tang-20 (3 of 30
#: seeds at regret ratio 0.53-0.70, against 0.02-0.10).
FLOOR_PORTFOLIO_OBSERVATIONS = 300
#: UCB1's exploration constant on rewards in (0, 1): mean + c sqrt(log n / n_i).
FLOOR_EXPLORATION = 0.5


@dataclass(frozen=True)
class FloorPortfolio:
    """The bandit's state as of one batch: the factor it runs on (``factors[index]``) and, per
    factor, the values credited so far (``observations``) and the sum of their rewards."""

    index: int
    observations: tuple[int, ...]
    rewards: tuple[float, ...]
    factors: tuple[float, ...]

    @property
    def factor(self) -> float:
        return self.factors[self.index]

    @property
    def exploring(self) -> bool:
        """Whether the batch tries a factor without values yet or whose mean reward is below
        another's: it closes after one selection (stop reason ``portfolio``), so that a wrong
        factor costs one evaluation a try (on Levy-20, whose regret ratio is 0.022 on the floor,
        a batch of six at twice the floor added 0.003)."""
        observations = np.array(self.observations)
        if observations[self.index] == 0:
            return True
        means = np.array(self.rewards) / np.maximum(observations, 1)
        return bool(means[self.index] < means[observations > 0].max())

    def to_dict(self) -> dict[str, object]:
        return {"factor": self.factor, "factors": list(self.factors),
                "observations": list(self.observations), "rewards": list(self.rewards)}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> FloorPortfolio:
        """Parse a stored portfolio; ValueError, TypeError or KeyError if malformed."""
        factors = tuple(float(v) for v in data["factors"])  # type: ignore[union-attr]
        observations = tuple(int(v) for v in data["observations"])  # type: ignore[union-attr]
        rewards = tuple(float(v) for v in data["rewards"])  # type: ignore[union-attr]
        factor = float(data["factor"])  # type: ignore[arg-type]
        if not factors or not len(factors) == len(observations) == len(rewards) \
                or factor not in factors:
            raise ValueError("factor, factors, observations and rewards do not match")
        if not all(math.isfinite(f) and f > 0 for f in factors) \
                or any(n < 0 for n in observations) \
                or not all(0 <= r <= n for r, n in zip(rewards, observations, strict=True)):
            raise ValueError("factors must be positive, observations and rewards in [0, n]")
        return cls(factors.index(factor), observations, rewards, factors)


def rank_quantiles(values: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Each of ``values``' rank quantile in ``among`` (which holds them): the fraction below it,
    ties counting half, in (0, 1)."""
    ordered = np.sort(among)
    below = np.searchsorted(ordered, values, side="left")
    equal = np.searchsorted(ordered, values, side="right") - below
    return (below + 0.5 * equal) / len(ordered)


def first_portfolio() -> FloorPortfolio:
    """The first batch on the floor: the floor itself, nothing credited."""
    return FloorPortfolio(0, (0,) * len(FLOOR_FACTORS), (0.0,) * len(FLOOR_FACTORS),
                          FLOOR_FACTORS)


def next_portfolio(last: FloorPortfolio | None, rewards: np.ndarray) -> FloorPortfolio:
    """The next batch's portfolio: ``last`` (None, or factors other than :data:`FLOOR_FACTORS`:
    a new one) credited with the ``rewards`` of its batch's values, then UCB1's factor: one not
    credited yet first, else the largest mean reward plus FLOOR_EXPLORATION sqrt(log n / n_i)."""
    if last is None or last.factors != FLOOR_FACTORS:
        return first_portfolio()
    observations, sums = np.array(last.observations), np.array(last.rewards)
    observations[last.index] += len(rewards)
    sums[last.index] += float(np.sum(rewards))
    untried = np.flatnonzero(observations == 0)
    if len(untried):
        index = int(untried[0])
    else:
        bonus = np.sqrt(np.log(observations.sum()) / observations)
        index = int(np.argmax(sums / observations + FLOOR_EXPLORATION * bonus))
    return FloorPortfolio(index, tuple(int(n) for n in observations),
                          tuple(float(s) for s in sums), last.factors)
