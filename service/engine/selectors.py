"""How the next arm of a batch is chosen, given the batch's frozen posterior.

:class:`LazyUCB` implements BBKB Appendix A.3: inside a batch the mean is frozen and variances only
shrink, so every UCB can only decrease; stale values are upper bounds, and only the top stale
entries need recomputing until the best fresh value beats every remaining stale bound. The result
equals the full argmax (ties to the lowest index) while touching few arms, in time independent of
the number of candidates A after one sort per batch.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Selector(Protocol):
    #: Whether :meth:`select` draws from its generator; the strategy passes None where it does
    #: not (LazyUCB: a generator costs 20 us to seed, a quarter of a step at A = 2000).
    draws: bool

    def start(self, posterior: object, width: float,
              blocked: np.ndarray | None = None) -> None:
        """``blocked``: arms never to propose; a deterministic batch marks each selection in
        it as it goes, so :meth:`select` reads it as it is then."""

    def select(self, rng: np.random.Generator | None) -> int: ...


class LazyUCB:
    """argmax_x mu(x) + width * sigma~(x), refreshed lazily (BBKB Alg. 1 lines 4, 7-8).

    Arms never refreshed in this batch keep their start-of-batch bound, so one argsort at batch
    start orders them for the whole batch; a step refreshes the best few of them and of the arms
    refreshed before, O(k + refreshed so far) instead of O(A). Ties go to the lowest index, as
    ``np.argmax`` of the exact UCBs would.
    """

    first_block = 8
    draws = False

    def start(self, posterior, width: float,  # type: ignore[no-untyped-def]
              blocked: np.ndarray | None = None) -> None:
        self.posterior, self.width, self.blocked = posterior, width, blocked
        self.bound = posterior.mean + width * np.sqrt(posterior.variance_start)
        if blocked is not None:  # arms never to propose (a boolean mask over the candidates)
            self.bound[blocked] = -np.inf
        self.order = np.argsort(-self.bound, kind="stable")  # best first, ties by index
        self.next = 0  # self.order[self.next:] still hold their start-of-batch bound
        # -bound of the arms refreshed so far, self.order[:self.next], in that order (kept in
        # step: a step reads it in place instead of gathering the bounds of every arm refreshed)
        self._negative = np.empty(len(self.bound))
        self.refreshed = 0  # number of UCBs recomputed in this batch (diagnostics)

    @property
    def touched(self) -> np.ndarray:
        """Arms refreshed at least once in this batch, in the order first refreshed."""
        return self.order[: self.next]

    def ucb(self, idx: np.ndarray) -> np.ndarray:
        """Exact current UCB of arms idx."""
        var = np.maximum(self.posterior.variance(idx), 0.0)
        ucb = self.posterior.mean[idx] + self.width * np.sqrt(var)
        return ucb if self.blocked is None else np.where(self.blocked[idx], -np.inf, ucb)

    def select(self, rng: np.random.Generator | None = None) -> int:
        # Every refresh (its arms, the order of its rows, hence every bit of every UCB: a GEMM's
        # rounding depends on the rows' order) is that of the plain form, which gathered the
        # bounds of the touched arms, argpartitioned their negatives and concatenated arrays of
        # that size at each step; argpartition runs on the same values in the same order here,
        # kept in place, and the touched arms are self.order[:self.next] (never copied).
        k, A, order, negative = self.first_block, len(self.bound), self.order, self._negative
        while True:
            n = self.next  # arms touched before this round
            fresh = order[n : n + k]
            self.next = n + len(fresh)
            if n > k:
                position = np.argpartition(negative[:n], k - 1)[:k]
                top = np.concatenate([order[position], fresh])
            else:
                position = slice(0, n)
                top = order[: self.next].copy()
            ucb = self.ucb(top)
            self.bound[top] = ucb
            self.refreshed += len(top)
            np.negative(ucb, out=ucb)
            negative[position] = ucb[: len(top) - len(fresh)]
            negative[n : self.next] = ucb[len(top) - len(fresh) :]
            touched = negative[: self.next]
            lowest = touched.min()  # -(the best bound); ties: the lowest arm index
            best = int(order[: self.next][touched == lowest].min())
            if self.next < A:  # the best remaining start-of-batch bound, lowest index on ties
                rival = int(order[self.next])
                if (self.bound[rival], -rival) > (self.bound[best], -best):
                    k = min(4 * k, A)
                    continue
            if np.any(top == best):
                return best
            k = min(4 * k, A)


class Thompson:
    """Batch Thompson sampling on the Nystrom posterior (the paper's async-TS baseline).

    f = mu + scale * (Z' eps + sqrt(resid / lam) eta), eps ~ N(0, I_m'), eta ~ N(0, I_A): a draw
    whose in-span covariance is the posterior's (pending points included) and whose residual part
    is independent per arm.
    """

    draws = True

    def start(self, posterior, width: float,  # type: ignore[no-untyped-def]
              blocked: np.ndarray | None = None) -> None:
        self.posterior, self.scale, self.blocked = posterior, width, blocked
        self.residual_sd = np.sqrt(posterior.residual / posterior.lam)

    def select(self, rng: np.random.Generator) -> int:
        p = self.posterior
        draw = p.whitened @ rng.standard_normal(p.dim)
        draw += self.residual_sd * rng.standard_normal(len(draw))
        draw = p.mean + self.scale * draw
        if self.blocked is not None:
            draw[self.blocked] = -np.inf
        return int(np.argmax(draw))


class EpsilonGreedy:
    """Uniform arm with probability epsilon, else the best posterior mean not yet in the batch."""

    draws = True

    def __init__(self, epsilon: float) -> None:
        self.epsilon = epsilon

    def start(self, posterior, width: float,  # type: ignore[no-untyped-def]
              blocked: np.ndarray | None = None) -> None:
        self.mean, self.blocked = posterior.mean.copy(), blocked
        self.allowed = None if blocked is None else np.flatnonzero(~blocked)
        if blocked is not None:
            self.mean[blocked] = -np.inf

    def select(self, rng: np.random.Generator) -> int:
        if rng.random() < self.epsilon:
            arm, self.allowed = _uniform(rng, len(self.mean), self.allowed, self.blocked)
            return arm
        arm = int(np.argmax(self.mean))
        while self.blocked is not None and self.blocked[arm]:  # imported since (deterministic)
            self.mean[arm] = -np.inf
            arm = int(np.argmax(self.mean))
        self.mean[arm] = -np.inf if np.isfinite(self.mean).sum() > 1 else self.mean[arm]
        return arm


class Uniform:
    """Each arm with probability 1/A."""

    draws = True

    def start(self, posterior, width: float,  # type: ignore[no-untyped-def]
              blocked: np.ndarray | None = None) -> None:
        self.n_arms, self.blocked = len(posterior.variance_start), blocked
        self.allowed = None if blocked is None else np.flatnonzero(~blocked)

    def select(self, rng: np.random.Generator) -> int:
        arm, self.allowed = _uniform(rng, self.n_arms, self.allowed, self.blocked)
        return arm


class Design:
    """Hand out a precomputed initial design in order (uniform first point, or Alg. 3)."""

    draws = False

    def __init__(self, arms: list[int]) -> None:
        self.arms = arms

    def start(self, posterior, width: float,  # type: ignore[no-untyped-def]
              blocked: np.ndarray | None = None) -> None:
        self.position, self.blocked = 0, blocked

    def select(self, rng: np.random.Generator | None = None) -> int:
        blocked = self.blocked  # None but in deterministic batches (none at b = 0 otherwise)
        while blocked is not None and self.position < len(self.arms) \
                and blocked[self.arms[self.position]]:  # imported since the batch opened
            self.position += 1
        if self.position == len(self.arms):  # imports took the rest: the first free arm
            return int(np.flatnonzero(~blocked)[0])  # type: ignore[operator]
        arm = self.arms[self.position]
        self.position += 1
        return arm


def _uniform(rng: np.random.Generator, n_arms: int, allowed: np.ndarray | None,
             blocked: np.ndarray | None) -> tuple[int, np.ndarray | None]:
    """A uniform arm among ``allowed`` (None: all), and ``allowed``: recomputed, O(A), and the
    arm drawn again, only when the draw hit an arm ``blocked`` since (a deterministic batch
    marks its selections and imports in the mask)."""
    if allowed is None:
        return int(rng.integers(n_arms)), None
    arm = int(allowed[rng.integers(len(allowed))])
    if blocked is not None and blocked[arm]:
        allowed = np.flatnonzero(~blocked)
        arm = int(allowed[rng.integers(len(allowed))])
    return arm, allowed
