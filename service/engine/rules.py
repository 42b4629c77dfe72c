"""Batch stopping rules: when does the current batch close?

Each rule sees the batch's selections one at a time, *after* the arm has been chosen and before the
posterior is updated with it, and answers whether the batch closes with that arm as its last point
(BBKB Alg. 1 line 5: the point that crosses the threshold stays in the batch).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

import numpy as np


class BatchPosterior(Protocol):
    variance_start: np.ndarray

    def variance(self, idx: np.ndarray) -> np.ndarray: ...

    def covariance_start(self, arm: int) -> np.ndarray: ...


class StoppingRule(Protocol):
    """Stateful per batch: ``start`` at batch opening, ``closes`` once per selection."""

    def start(self, posterior: BatchPosterior) -> None: ...

    def closes(self, arm: int) -> str | None:
        """The stop reason if the batch closes after ``arm``, else None."""


class GlobalRule:
    """BBKB Lemma 1: close when 1 + sum over the batch of sigma~^2_start(x_s) > C~."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def start(self, posterior: BatchPosterior) -> None:
        self._var = posterior.variance_start
        self.accumulator = 1.0

    def closes(self, arm: int) -> str | None:
        self.accumulator += self._var[arm]
        return "global" if self.accumulator > self.threshold else None


class LocalRule:
    """BBKB Lemma 3: r_i += k~_start(x_i, x_s)^2 / sigma~^2_start(x_i); close if 1 + max r > C~."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    #: Bytes of the per-arm terms kept for the batch (:meth:`add`): a batch often repeats a few
    #: arms thousands of times, and each term costs a kernel column and an A x m' product.
    cache_bytes = 64 * 2**20

    def start(self, posterior: BatchPosterior) -> None:
        self._posterior = posterior
        var = posterior.variance_start
        self._inv_var = np.divide(1.0, var, out=np.zeros_like(var), where=var > 1e-300)
        self.ratio = np.zeros_like(var)
        # arm -> its term k~_start(., x)^2 / sigma~^2_start, least recently used first: the
        # posterior is frozen for the batch, so a repeated arm adds the same array bit for bit
        self._terms: OrderedDict[int, np.ndarray] = OrderedDict()
        self._max_terms = max(1, self.cache_bytes // max(var.nbytes, 1))

    def add(self, arm: int) -> None:
        term = self._terms.get(arm)
        if term is None:
            g = self._posterior.covariance_start(arm)
            term = g * g * self._inv_var
            if len(self._terms) >= self._max_terms:
                self._terms.popitem(last=False)
            self._terms[arm] = term
        else:
            self._terms.move_to_end(arm)
        self.ratio += term

    def closes(self, arm: int) -> str | None:
        self.add(arm)
        if 1.0 + self.ratio.max() > self.threshold:
            self._terms.clear()  # the batch is over: no memory kept while the study is cached
            return "local"
        return None


class CombinedRule:
    """Lemma 1 while it holds (cheap); once it fires, switch to the tighter Lemma 3 test."""

    def __init__(self, threshold: float) -> None:
        self._global, self._local = GlobalRule(threshold), LocalRule(threshold)

    def start(self, posterior: BatchPosterior) -> None:
        self._posterior = posterior
        self._global.start(posterior)
        self._local_on = False
        self._arms: list[int] = []

    def closes(self, arm: int) -> str | None:
        self._arms.append(arm)
        if not self._local_on:
            if self._global.closes(arm) is None:
                return None
            self._local_on = True
            self._local.start(self._posterior)
            for past in self._arms[:-1]:
                self._local.add(past)
        return self._local.closes(arm)


class ProductRule:
    """GP-BUCB (Desautels et al. 2014, Prop. 1): close when prod (1 + sigma^2_{s-1}(x_s)) > C."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def start(self, posterior: BatchPosterior) -> None:
        self._posterior = posterior
        self.accumulator = 1.0

    def closes(self, arm: int) -> str | None:
        self.accumulator *= 1.0 + float(self._posterior.variance(np.array([arm]))[0])
        return "product" if self.accumulator > self.threshold else None


class FixedSizeRule:
    """Close after ``size`` selections (BKB and GP-UCB: size 1; fixed-batch baselines)."""

    def __init__(self, size: int, reason: str = "fixed") -> None:
        self.size, self.reason = size, reason

    def start(self, posterior: BatchPosterior) -> None:
        self.count = 0

    def closes(self, arm: int) -> str | None:
        self.count += 1
        return self.reason if self.count >= self.size else None


class UntilRepeatRule:
    """``rule``, and close as soon as the batch repeats one of its arms (used before the first
    kernel fit, so that each batch brings new arms to fit on)."""

    def __init__(self, rule: StoppingRule) -> None:
        self.rule = rule

    def start(self, posterior: BatchPosterior) -> None:
        self.rule.start(posterior)
        self._arms: set[int] = set()

    def closes(self, arm: int) -> str | None:
        reason = self.rule.closes(arm)  # always: the inner rule accumulates
        if arm in self._arms:
            return "repeat"
        self._arms.add(arm)
        return reason
