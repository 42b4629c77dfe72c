"""One ask/tell engine for every strategy: a posterior model, a selector and a stopping rule.

A :class:`Strategy` hands out candidates batch by batch (BBKB Alg. 1). Inside a batch the
posterior mean and the dictionary are frozen and pending points shrink the variance; at the next
opening the outcomes that have arrived are folded in and a new dictionary is sampled.

- ``sync`` mode (the paper's protocol): a closed batch opens the next one only once every
  selection has a value or was abandoned; until then :meth:`Strategy.ask` returns nothing and
  :attr:`Strategy.waiting` says why.
- ``async`` mode: the next batch opens at once, folding whatever feedback has arrived; pending
  points count in the variance only.

Randomness is drawn from counter-based streams ``default_rng([seed, stream, index])`` (index = t
for a selection, b for a dictionary), so the state to persist is just the seed. Rebuilding from
:class:`EngineState` recomputes the current batch's posterior from the records and replays its
selections through the same code, hence proposes exactly what the live object would.

This module is ask/tell and the batch lifecycle; beside it: the checks of candidates and values
(:mod:`.validation`), the kernel's hyper-parameters (:class:`autokernel.KernelTuner`), and the
models of GSSBO and GO-UCB (:mod:`.literature`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .autokernel import REFIT_MIN_ARMS, KernelState, KernelTuner, refit_due
from .config import EXACT_STRATEGIES, LITERATURE_STRATEGIES, NO_KERNEL_STRATEGIES, EngineConfig
from .dictionary import resparsify, uncertainty_sampling, warm_start_dictionary
from .errors import ExhaustedError, SelectionError
from .exact import ExactPosterior
from .gssbo import GSSPosterior
from .literature import (
    literature_design,
    literature_model,
    literature_posterior,
    literature_rule,
    literature_width,
)
from .normalize import choose_scaling
from .nystrom import NystromPosterior
from .records import ABANDONED, IMPORTED, OBSERVED, PENDING, SUGGESTED, Records, Selection
from .rules import (
    CombinedRule,
    FixedSizeRule,
    GlobalRule,
    LocalRule,
    ProductRule,
    StoppingRule,
    UntilRepeatRule,
)
from .selectors import Design, EpsilonGreedy, LazyUCB, Selector, Thompson, Uniform
from .validation import MAX_MAGNITUDE as MAX_MAGNITUDE  # re-exported (tests/client read it)
from .validation import as_candidates, as_value, check_dimension
from .validation import value_problem as value_problem  # re-exported

#: The random streams, default_rng([seed, stream, index]), and the index each is drawn at
STREAM_SELECT = 0      # t: a selection's draw (selectors with ``draws``)
STREAM_DICTIONARY = 1  # b: batch b's dictionary
STREAM_DESIGN = 2      # 0: the initial design's uniform arms
STREAM_HYPER = 3       # b + 1: the refit at batch b's opening
STREAM_LITERATURE = 4  # b: GSSBO's / GO-UCB's fits for batch b
STREAM_REDRAW = 5      # b: batch b's dictionary redrawn after a refit changed the kernel
_NO_DICTIONARY = ("uniform", *EXACT_STRATEGIES, *LITERATURE_STRATEGIES)
#: Values observed up to this many noise sd (xi) outside [0, 1] are still in it: on values
#: rescaled to [0, 1] with N(0, 0.01^2) noise, shifting by the lowest noisy value put the prior
#: mean ~2.5 xi under the function's minimum and trapped more Hartmann-6 runs at its local
#: maximum (auto, T = 2000, 30 seeds: regret ratio 0.086 against 0.045 as given).
VALUE_NOISE_MARGIN = 3.0


@dataclass(frozen=True)
class BatchInfo:
    """What happened in one batch (for reports and the service's batch history)."""

    index: int
    start: int
    dictionary_size: int
    embedding_dim: int
    open_seconds: float  # dictionary sampling + kernel refit + posterior build
    #: the dictionary resampling alone (Alg. 1 lines 11-16, or the warm start's leverage-score
    #: sampling, and the redraw after a refit that changed the kernel); NaN for strategies
    #: without a dictionary and for restored batches
    resparsify_seconds: float = field(default=math.nan, compare=False)
    #: the kernel hyper-parameter fit (hyperparameters.fit and its bookkeeping); NaN at
    #: batches without one and for restored batches. open_seconds minus it is the paper's
    #: resparsification step (resampling, embeddings, variances and means; BBKB App. C)
    refit_seconds: float = field(default=math.nan, compare=False)
    size: int = 0
    stop_reason: str | None = None
    dictionary: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False,
                                   repr=False)
    hyperparameters: dict[str, Any] | None = field(default=None, compare=False)  # KernelState


@dataclass
class EngineState:
    """Everything needed, with config and candidates, to rebuild a strategy exactly."""

    batch: int
    batch_start: int
    dictionary: np.ndarray
    records: dict[str, np.ndarray] = field(default_factory=dict)
    hyperparameters: dict[str, Any] | None = None  # the batch's KernelState; None: initial


def _resolve(config: EngineConfig | dict[str, Any] | None,
             overrides: dict[str, Any]) -> EngineConfig:
    """An :class:`EngineConfig` from one, a dict of its fields or None, with ``overrides``."""
    if not isinstance(config, EngineConfig):
        return EngineConfig(**((config or {}) | overrides))
    return config.replace(**overrides) if overrides else config


class Strategy:
    """Ask/tell optimiser over a finite candidate set (BBKB and its family)."""

    def __init__(self, candidates: Any, config: EngineConfig | dict[str, Any] | None = None,
                 **overrides: Any) -> None:
        self._setup(_resolve(config, overrides), candidates, None)

    def _setup(self, config: EngineConfig, candidates: Any, hyper: KernelState | None) -> None:
        """The empty strategy on ``hyper`` (None: the initial kernel state)."""
        self.config = config
        self.candidates = as_candidates(candidates)
        check_dimension(config, self.candidates.shape[1])
        self._records = Records()
        self._batch, self._batch_start = -1, 0
        self._values = (0.0, 1.0)  # the current batch's (offset, scale) of the values
        self._dictionary = np.zeros(0, dtype=np.int64)
        self._closed = True
        self._posterior: Any = None
        self._workspace: np.ndarray | None = None  # the z' buffer handed from batch to batch
        self._exact: ExactPosterior | None = None
        self._normalized = choose_scaling(self.candidates, config.normalize).apply(
            self.candidates)
        self._tuner = KernelTuner(config, self._normalized)
        self._install_kernel(self._tuner.initial_state() if hyper is None else hyper)
        self._literature = literature_model(config, self.candidates)
        self.batches: list[BatchInfo] = []
        self.replay_mismatches = 0
        #: ``deterministic``: the candidates proposed or imported so far (from the current batch's
        #: opening on: its selector's blocked mask, marked as the batch goes) and their number
        self._taken: np.ndarray | None = None
        self._n_taken = 0

    # ------------------------------------------------------------------ public surface
    @property
    def n_arms(self) -> int:
        return len(self.candidates)

    @property
    def t(self) -> int:
        """Number of records (selections and imported observations)."""
        return len(self._records)

    @property
    def batch(self) -> int:
        """Index of the current batch (-1 before the first ask)."""
        return self._batch

    @property
    def batch_closed(self) -> bool:
        return self._closed

    @property
    def dictionary(self) -> np.ndarray:
        return self._dictionary.copy()

    @property
    def waiting(self) -> str | None:
        """Why ask() would return nothing now (sync mode only), else None."""
        if not (self._closed and self._batch >= 0 and self.config.mode == "sync"):
            return None
        pending = int(np.count_nonzero(self._records.status == PENDING))
        if pending == 0:
            return None
        return f"batch {self._batch} is complete; waiting for {pending} pending result(s)"

    @property
    def records(self) -> dict[str, np.ndarray]:
        """Copies of the history columns (arm, batch, kind, status, value, folded, var_start)."""
        return self._records.columns()

    def resolved(self) -> int:
        """Number of suggested selections with an outcome (observed or abandoned)."""
        return self.outcomes()[0]

    def outcomes(self) -> tuple[int, int]:
        """Suggested selections with an outcome (observed or abandoned), and of those the ones
        with a value (their trials completed)."""
        n = len(self._records)
        suggested, status = self._records.kind[:n] == SUGGESTED, self._records.status[:n]
        return (int(np.count_nonzero(suggested & (status != PENDING))),
                int(np.count_nonzero(suggested & (status == OBSERVED))))

    def ask(self, count: int = 1, seconds: float | None = None) -> list[Selection]:
        """Up to ``count`` next selections; fewer while a sync batch waits for results, once
        a ``deterministic`` strategy has proposed every candidate (then ExhaustedError), or
        once ``seconds`` have passed (at least one selection is made; the next ask goes on
        where this one stopped, so the selections are the same either way)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SelectionError(f"count must be a positive integer, got {count!r}",
                                 field="count")
        if self.exhausted:
            raise self._nothing_left()
        deadline = math.inf if seconds is None else time.perf_counter() + seconds
        out: list[Selection] = []
        while len(out) < count and not self.exhausted:
            if out and time.perf_counter() >= deadline:
                break
            if self._closed:
                if self.waiting:
                    break
                self._open_batch()
            out.append(self._select(len(self._records)))
        return out

    def ask_batch(self) -> list[Selection]:
        """The rest of the current batch (a whole batch if one has to be opened)."""
        if self.exhausted:
            raise self._nothing_left()
        if self._closed:
            if self.waiting:
                return []
            self._open_batch()
        out = []
        while not self._closed and not self.exhausted:
            out.append(self._select(len(self._records)))
        return out

    @property
    def exhausted(self) -> bool:
        """``deterministic``: every candidate has been proposed or imported, so ``ask`` has
        nothing left to hand out (it returns what it could, then raises SelectionError)."""
        if not self.config.deterministic:
            return False
        if self._taken is None:  # before the first batch: imports only (read, never written
            # here: the server reads this without the study's lock, Runtimes.exhausted)
            return len(np.unique(self._records.arm[: len(self._records)])) >= self.n_arms
        return self._n_taken >= self.n_arms

    def _nothing_left(self) -> ExhaustedError:
        return ExhaustedError(f"every one of the {self.n_arms} candidates has been proposed or "
                              "imported, and a deterministic study proposes none twice",
                              field="candidates")

    def tell(self, t: int, value: float) -> None:
        """Record the observed value of selection t (any time, in any order; idempotent)."""
        t, value = self._records.check(t), as_value(value)
        status = self._records.status[t]
        if status == OBSERVED:
            if self._records.value[t] == value:
                return
            raise SelectionError(f"selection {t} already has value {self._records.value[t]!r};"
                                 f" refusing a different value {value!r}", field="value")
        if status == ABANDONED:
            raise SelectionError(f"selection {t} was abandoned; its value can no longer be used",
                                 field="t")
        self._records.set(t, status=OBSERVED, value=value)

    def abandon(self, t: int) -> None:
        """Selection t failed for good: it stops counting once the next batch opens."""
        t = self._records.check(t)
        status = self._records.status[t]
        if status == OBSERVED:
            raise SelectionError(f"selection {t} already has a value; it cannot be abandoned",
                                 field="t")
        self._records.set(t, status=ABANDONED)

    def pending(self) -> np.ndarray:
        """Indices t of the records still waiting for an outcome."""
        return np.flatnonzero(self._records.status == PENDING)

    def catch_up(self, t: np.ndarray, records: dict[str, np.ndarray], batch: int) -> bool:
        """Apply what another process (same study, shared database) did since this object was
        current, instead of a rebuild; True if done. ``t`` and ``records`` (columns as in
        :attr:`records`) hold every record from t = len(history) on and those of :meth:`pending`
        (at least); ``batch`` is the latest batch of the shared history.

        Only changes inside the current batch apply: the other process's selections (replayed
        as in :meth:`restore`: the frozen posterior makes them independent of outcomes), imported
        observations and outcomes. False, leaving this object unusable (rebuild it), when a batch
        was opened, for GSSBO / GO-UCB (their models change at every outcome), or when a replayed
        selection is not the one this object would make.
        """
        n, cfg = len(self._records), self.config
        new = t >= n
        if batch != self._batch or self._batch < 0 or cfg.strategy in LITERATURE_STRATEGIES \
                or not np.array_equal(t[new], np.arange(n, n + int(new.sum()))) \
                or np.any(records["batch"][new] != self._batch) \
                or np.any(records["folded"][new] >= 0) \
                or not np.array_equal(records["arm"][~new], self._records.arm[t[~new]]):
            return False
        mismatches = self.replay_mismatches
        for i in np.flatnonzero(new):  # the other process's asks: a few per request
            kind, arm = int(records["kind"][i]), int(records["arm"][i])
            self._records.append(arm=arm, batch=self._batch, kind=kind,
                                 status=PENDING if kind == SUGGESTED else OBSERVED,
                                 value=math.nan if kind == SUGGESTED else records["value"][i],
                                 folded=-1, var_start=float(records["var_start"][i]))
            if kind == SUGGESTED:
                if self._closed:
                    return False
                self._select(int(t[i]), replay_arm=arm)
            else:
                self._take(arm)
        if self.replay_mismatches != mismatches:
            return False
        resolved = (records["status"] != PENDING) & (self._records.status[t] == PENDING)
        for i in np.flatnonzero(resolved):
            self._records.set(int(t[i]), status=int(records["status"][i]),
                              value=float(records["value"][i]))
        return True

    def observe(self, arm: int, value: float) -> Selection:
        """Import an existing (candidate, value) pair (warm start) as an observed record."""
        if isinstance(arm, bool) or not isinstance(arm, int | np.integer) \
                or not 0 <= arm < self.n_arms:
            raise SelectionError(f"unknown candidate index {arm!r} (A = {self.n_arms})",
                                 field="candidate")
        value = as_value(value)
        if self._posterior is not None:
            var = float(self._posterior.variance_start[arm])
        else:
            var = float(self._kernel.diag(self._X[arm : arm + 1])[0] / self._lam)
        batch = max(self._batch, 0)
        t = self._records.append(arm=int(arm), batch=batch, kind=IMPORTED, status=OBSERVED,
                                 value=value, folded=-1, var_start=var)
        self._take(int(arm))
        return Selection(t, int(arm), batch, var)

    def predict(self) -> tuple[np.ndarray, np.ndarray]:
        """Frozen mean (in the values' units) and start-of-batch sigma~^2 (in the units of the
        values as the model sees them, :meth:`_value_scaling`) of every candidate, (A,) each."""
        if self._posterior is None:
            prior = self._kernel.diag(self._X) / self._lam
            return np.zeros(self.n_arms), prior
        offset, scale = self._values
        return offset + scale * self._posterior.mean, self._posterior.variance_start.copy()

    @property
    def hyperparameters(self) -> KernelState | None:
        """The kernel hyper-parameters of the current batch (fixed inside a batch): the
        engine's kernel, GSSBO's own fit (:meth:`GSSPosterior.kernel_state`), or None where
        the batch uses no kernel (uniform, GO-UCB's network, GSSBO's initial design)."""
        if self.config.strategy not in NO_KERNEL_STRATEGIES:
            return self._hyper
        return self._posterior.kernel_state if isinstance(self._posterior, GSSPosterior) \
            else None

    def _hyperparameters_dict(self) -> dict[str, Any] | None:
        hyper = self.hyperparameters
        return None if hyper is None else hyper.to_dict()

    def state(self) -> EngineState:
        return EngineState(self._batch, self._batch_start, self._dictionary.copy(),
                           self._records.columns(), self._hyperparameters_dict())

    @classmethod
    def restore(cls, candidates: Any, config: EngineConfig | dict[str, Any],
                state: EngineState) -> Strategy:
        """Rebuild from config, candidates and state; proposes what the live object would."""
        config = _resolve(config, {})
        stored = None  # the current batch's kernel: install, never refit (restarts stay exact)
        if state.batch >= 0 and state.hyperparameters is not None \
                and config.strategy not in NO_KERNEL_STRATEGIES:  # (those rebuild theirs)
            stored = KernelState.from_dict(state.hyperparameters)
        strategy = cls.__new__(cls)
        strategy._setup(config, candidates, stored)  # no initial state: it would be replaced
        records = Records.from_columns(state.records)
        if len(records) and (records.arm.min() < 0 or records.arm.max() >= strategy.n_arms):
            raise SelectionError("history refers to candidate indices outside the candidate set",
                                 field="records.arm")
        strategy._records = records
        if state.batch < 0:
            return strategy
        if not 0 <= state.batch_start <= len(records):
            raise SelectionError(f"batch_start {state.batch_start} outside the history",
                                 field="batch_start")
        strategy._install_batch(state.batch, state.batch_start,
                                np.asarray(state.dictionary, dtype=np.int64), float("nan"))
        for t in range(state.batch_start, len(records)):
            if records.kind[t] == SUGGESTED:
                strategy._select(t, replay_arm=int(records.arm[t]))
            else:
                strategy._take(int(records.arm[t]))
        return strategy

    # ------------------------------------------------------------------ batch lifecycle
    def _rng(self, stream: int, index: int) -> np.random.Generator:
        return np.random.default_rng([self.config.seed, stream, index])

    def _select(self, t: int, replay_arm: int | None = None) -> Selection:
        selector = self._selector
        arm = selector.select(self._rng(STREAM_SELECT, t) if selector.draws else None)
        if replay_arm is not None:
            self.replay_mismatches += arm != replay_arm
            arm = replay_arm
        variance = float(self._posterior.variance_start[arm])
        if replay_arm is None:
            self._records.append(arm=arm, batch=self._batch, kind=SUGGESTED, status=PENDING,
                                 value=math.nan, folded=-1, var_start=variance)
        reason = self._rule.closes(arm)  # before the update: GP-BUCB needs sigma^2_{s-1}(x_s)
        self._posterior.add_pending(arm)
        self._take(arm)
        info = self.batches[-1]
        self.batches[-1] = BatchInfo(**{**info.__dict__, "size": info.size + 1,
                                        "stop_reason": reason})
        self._closed = reason is not None
        return Selection(t, arm, self._batch, variance)

    def _take(self, arm: int) -> None:
        """``deterministic``: the batch's selector proposes ``arm`` no more."""
        if self._taken is not None and not self._taken[arm]:
            self._taken[arm] = True
            self._n_taken += 1

    def _open_batch(self) -> None:
        started = time.perf_counter()
        b, start = self._batch + 1, len(self._records)
        records = self._records
        resolved = records.unfolded_resolved()
        records.folded[resolved] = b  # the outcomes that arrived enter the model now
        sampled = time.perf_counter()
        dictionary = self._sample_dictionary(b, start)
        resparsify_seconds = (math.nan if self.config.strategy in _NO_DICTIONARY
                              else time.perf_counter() - sampled)
        refit_started, previous = time.perf_counter(), self._hyper
        self._install_kernel(self._refit(b, start, dictionary))  # batch boundaries only
        refit_seconds = (time.perf_counter() - refit_started
                         if self._hyper.fitted_at != previous.fitted_at else math.nan)
        if (previous.lengthscale, previous.lam) != (self._hyper.lengthscale, self._hyper.lam):
            redrawn = time.perf_counter()
            dictionary = self._redraw_dictionary(b, start, dictionary)
            resparsify_seconds += time.perf_counter() - redrawn  # (NaN stays NaN)
        # the old batch is no longer needed: free its A x m' arrays before building the new ones
        # (halves peak memory: 8.6 -> ~4.4 GB at A = 10^6, m = 512); its z' buffer is reused
        self._workspace = getattr(self._posterior, "workspace", None)
        self._posterior = self._selector = self._rule = None
        self._install_batch(b, start, dictionary, started, resparsify_seconds, refit_seconds)

    def _masks(self, start: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Records (t < start) in V_all and observed, as of the opening of batch b."""
        status, folded = self._records.status[:start], self._records.folded[:start]
        done = (folded >= 0) & (folded <= b)
        return ~((status == ABANDONED) & done), (status == OBSERVED) & done

    def _batch_first_t(self, k: int) -> int:
        """First record t of batch k <= the current batch (its start)."""
        if k == self._batch:
            return self._batch_start
        return int(np.flatnonzero(self._records.batch == k)[0])

    def _counts(self, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Distinct arms, multiplicities and sums of values of the masked records."""
        n = len(mask)
        arms, inverse, counts = np.unique(self._records.arm[:n][mask], return_inverse=True,
                                          return_counts=True)
        values = np.nan_to_num(self._records.value[:n][mask])
        return arms, counts, np.bincount(inverse, weights=values, minlength=len(arms))

    def _sample_dictionary(self, b: int, start: int) -> np.ndarray:
        cfg = self.config
        if cfg.strategy in _NO_DICTIONARY:
            return np.zeros(0, dtype=np.int64)
        arms, counts, _ = self._counts(self._masks(start, b)[0])
        rng = self._rng(STREAM_DICTIONARY, b)
        records = self._records
        imported_now = np.any((records.kind[:start] == IMPORTED) & (records.folded[:start] == b))
        if self._posterior is None or imported_now:  # existing data: leverage-score sampling
            return warm_start_dictionary(self._kernel, self._X, arms, counts, lam=self._lam,
                                         oversampling=cfg.oversampling, rng=rng,
                                         block_rows=cfg.block_rows)
        return resparsify(arms, counts, self._posterior.variance_start, cfg.oversampling, rng)

    def _redraw_dictionary(self, b: int, start: int, dictionary: np.ndarray) -> np.ndarray:
        """Batch b's dictionary once a refit changed the kernel (lengthscales or lam).

        ``dictionary`` was drawn with the previous batch's variances under the old kernel, but
        BBKB Lemma 2 (proof, App. B) needs inclusion probabilities of at least a constant times
        the new posterior's variances: under one kernel sigma~^2_old >= sigma^2_old / 3 >=
        sigma^2_new / 3, which a shorter lengthscale or a smaller lam breaks. One round of
        q-bar n_a sigma~^2 sampling of the V_all arms, sigma~^2 their Nystrom variance under
        the new kernel against ``dictionary`` (which stays the refit's inducing points)."""
        cfg = self.config
        if cfg.strategy in _NO_DICTIONARY:
            return dictionary
        arms, counts, _ = self._counts(self._masks(start, b)[0])
        return warm_start_dictionary(self._kernel, self._X, arms, counts, lam=self._lam,
                                     oversampling=cfg.oversampling,
                                     rng=self._rng(STREAM_REDRAW, b), rounds=1,
                                     block_rows=cfg.block_rows, start=dictionary)

    def _install_batch(self, b: int, start: int, dictionary: np.ndarray, started: float,
                       resparsify_seconds: float = math.nan,
                       refit_seconds: float = math.nan) -> None:
        """Build batch b's posterior, selector and rule from the records (live and restore)."""
        self._batch, self._batch_start, self._dictionary = b, start, dictionary
        pulled, observed = self._masks(start, b)
        self._values = self._value_scaling(observed)
        self._posterior = self._build_posterior(pulled, observed)
        proposed = self._proposed_before_fit(start, pulled)
        blocked = self._blocked(start, pulled, proposed)
        if self.config.deterministic:  # the mask the batch marks as it goes (_take)
            self._taken, self._n_taken = blocked, int(np.count_nonzero(blocked))
        self._selector, self._rule = self._components(b, start, blocked)
        if proposed is not None:
            self._rule = UntilRepeatRule(self._rule)
        self._rule.start(self._posterior)
        self._selector.start(self._posterior, self._width(observed), blocked)
        self._closed = False
        seconds = time.perf_counter() - started if math.isfinite(started) else math.nan
        self.batches.append(BatchInfo(b, start, len(dictionary),
                                      getattr(self._posterior, "dim", 0), seconds,
                                      resparsify_seconds=resparsify_seconds,
                                      refit_seconds=refit_seconds,
                                      dictionary=dictionary,
                                      hyperparameters=self._hyperparameters_dict()))

    def _proposed_before_fit(self, start: int, pulled: np.ndarray) -> np.ndarray | None:
        """The distinct arms proposed (or imported) before ``start`` while the batch opening
        there (``pulled``: its V_all mask, :meth:`_masks`) is in the phase before the first
        fit, else None.

        The phase: automatic hyper-parameters on a strategy that fits them, after the initial
        design, before the first fit, while fewer than REFIT_MIN_ARMS distinct arms (or every
        candidate not failed) have been proposed and not failed, as known at this opening. A
        batch in it proposes none of these arms again and closes at its first repeat (which it
        still hands out), so that each batch brings new arms: a repeated arm says nothing about
        the lengthscale, and UCB on the start's lengthscale could repeat one arm for the whole
        run and never reach a fit (Abalone, explore = 0.1: 6 of 100 seeds, regret ratio
        0.32-0.43 against 0.12; benchmarks/hyperparameters.md).
        """
        if not self._tuner.fits or self._hyper.fitted_at > 0 or start == 0:
            return None
        arms = self._records.arm[:start]
        failed = np.unique(arms[~pulled])
        usable = np.setdiff1d(arms[pulled], failed)  # distinct, sorted
        if len(usable) >= min(REFIT_MIN_ARMS, self.n_arms - len(failed)):
            return None
        return np.unique(arms)  # = usable + failed: fewer than n_arms, so some arm stays free

    def _blocked(self, start: int, pulled: np.ndarray,
                 proposed: np.ndarray | None = None) -> np.ndarray | None:
        """Arms the batch opening at ``start`` never proposes (None when there is none): those
        whose evaluation failed for good as known then (``~pulled``, :meth:`_masks`; a candidate
        that crashes its objective would otherwise stay the UCB argmax, since an abandoned
        selection carries no information), and ``proposed`` (:meth:`_proposed_before_fit`).
        ``deterministic``: every arm proposed or imported before ``start`` (always a mask)."""
        blocked = np.zeros(self.n_arms, dtype=bool)
        blocked[self._records.arm[:start][~pulled]] = True
        if blocked.all():
            raise SelectionError("every candidate has failed for good; nothing is left to "
                                 "propose", field="candidates")
        if proposed is not None:
            blocked[proposed] = True
        if self.config.deterministic:
            blocked[self._records.arm[:start]] = True
            return blocked
        return blocked if blocked.any() else None

    def _value_scaling(self, observed: np.ndarray) -> tuple[float, float]:
        """(offset, scale) of the batch's values: its model sees (y - offset) / scale.

        The defaults (noise xi, rkhs_bound F, the prior mean 0) are the papers' protocol: values
        on [0, 1] with the function's minimum near 0 (BBKB Sec. 5 rescales the targets by their
        true minimum and maximum, which a user does not know). Under ``normalize_values``
        "unit", the values observed as of the opening (``observed``, :meth:`_masks`) are left
        alone if they lie in [-m, 1 + m], m = VALUE_NOISE_MARGIN xi; otherwise the smallest
        affine change maps them into it: scale = max(1, observed range / (1 + 2m)) and the
        offset nearest 0. The observed range is a lower bound of the function's, so a wider
        one contradicts the defaults for sure and a narrower one does not: values spanning more
        are min-max rescaled (proposals then do not change when they are multiplied by a
        positive number or shifted), values spanning less only shifted. Stretching a narrow
        early range onto [0, 1] instead made BBKB exploit early bumps (Hartmann-6, auto,
        T = 2000, 10 seeds: regret ratio 0.51 against 0.037 as given). Frozen for the batch,
        and a function of the records, so a restore recomputes it. GSSBO and GO-UCB
        standardise their values themselves.
        """
        cfg = self.config
        if cfg.normalize_values == "none" or cfg.strategy in LITERATURE_STRATEGIES \
                or not observed.any():
            return 0.0, 1.0
        values = self._records.value[: len(observed)][observed]
        low, high = float(values.min()), float(values.max())
        margin = VALUE_NOISE_MARGIN * cfg.noise  # the band [-margin, 1 + margin] is left alone
        scale = max(1.0, (high - low) / (1.0 + 2.0 * margin))
        return min(max(0.0, high - (1.0 + margin) * scale), low + margin * scale), scale

    def _build_posterior(self, pulled: np.ndarray, observed: np.ndarray) -> Any:
        cfg = self.config
        if cfg.strategy in LITERATURE_STRATEGIES:
            assert self._literature is not None
            return literature_posterior(self._literature, cfg, self.candidates, self._batch,
                                        self._records, self._masks, self._batch_first_t,
                                        lambda k: self._rng(STREAM_LITERATURE, k))
        offset, scale = self._values
        if self._exact is not None:
            n = len(pulled)
            self._exact.reset_to(self._records.arm[:n][pulled].tolist())
            self._exact.open_batch(np.flatnonzero(observed[pulled]),
                                   (self._records.value[:n][observed] - offset) / scale)
            return self._exact
        arms, counts, _ = self._counts(pulled)
        obs_arms, obs_counts, obs_sums = self._counts(observed)
        obs_sums = (obs_sums - obs_counts * offset) / scale
        workspace, self._workspace = self._workspace, None
        return NystromPosterior(self._kernel, self._X, self._dictionary, lam=self._lam,
                                pulled_arms=arms, pulled_counts=counts, observed_arms=obs_arms,
                                observed_counts=obs_counts, observed_sums=obs_sums,
                                block_rows=cfg.block_rows, workspace=workspace)

    # ---------------------------------------------------------- a batch's selector, rule, width
    def _components(self, b: int, start: int,
                    blocked: np.ndarray | None) -> tuple[Selector, StoppingRule]:
        cfg = self.config
        if b == 0 and (start == 0 or cfg.strategy in LITERATURE_STRATEGIES) \
                and cfg.strategy != "uniform":
            design = self._initial_design()
            if cfg.deterministic and blocked is not None:  # Alg. 3 repeats arms; imports
                design = [a for a in dict.fromkeys(design) if not blocked[a]] or \
                    [int(np.flatnonzero(~blocked)[0])]
            return Design(design), FixedSizeRule(len(design), "initial")
        batched = {"global": GlobalRule, "local": LocalRule, "combined": CombinedRule}
        table: dict[str, tuple[Selector, StoppingRule]] = {
            "bbkb": (LazyUCB(), batched[cfg.stopping_rule](cfg.batch_threshold)),
            "bkb": (LazyUCB(), FixedSizeRule(1, "sequential")),
            "gp-ucb": (LazyUCB(), FixedSizeRule(1, "sequential")),
            "gp-bucb": (LazyUCB(), ProductRule(cfg.batch_threshold)),
            "thompson": (Thompson(), FixedSizeRule(cfg.batch_size)),
            "epsilon-greedy": (EpsilonGreedy(cfg.epsilon), FixedSizeRule(cfg.batch_size)),
            "uniform": (Uniform(), FixedSizeRule(cfg.batch_size)),
            "gssbo": (LazyUCB(), literature_rule(cfg)),
            "go-ucb": (LazyUCB(), literature_rule(cfg)),
        }
        return table[cfg.strategy]

    def _initial_design(self) -> list[int]:
        """Uncertainty sampling for a minimum parallelism P (Alg. 3), else one uniform arm."""
        cfg = self.config
        if cfg.strategy in LITERATURE_STRATEGIES:
            return literature_design(cfg, self.n_arms, self._rng(STREAM_DESIGN, 0))
        design: list[int] = []
        if cfg.min_parallelism is not None:
            design = uncertainty_sampling(self._kernel, self._X, lam=self._lam,
                                          min_parallelism=cfg.min_parallelism,
                                          max_points=cfg.max_init_points)
        return design or [int(self._rng(STREAM_DESIGN, 0).integers(self.n_arms))]

    def _width(self, observed: np.ndarray) -> float:
        """alpha = explore * C * beta, beta of BBKB Theorem 2 over the folded observations."""
        cfg = self.config
        if cfg.strategy in LITERATURE_STRATEGIES:
            return literature_width(cfg, self._posterior, self.n_arms, observed)
        inflation = 1.0 if self._exact is not None else 3.0  # Lemma 2's factor 3 for Nystrom
        var = self._records.var_start[: len(observed)][observed]
        info_gain = float(np.sum(np.log1p(inflation * var)))
        # beta at the configured lam, then in the units of sigma~ at the lam in use: with a
        # fitted lam (noise / signal variance) alpha sigma~ stays beta_cfg times the posterior
        # standard deviation of a unit kernel, only that posterior is the fitted model's
        # (the same as before when lam = cfg.lam; beta at the fitted lam itself grew as
        # lam^-1/2 through the noise term and explored 4-6x more on Cadata)
        beta = (2.0 * cfg.noise * math.sqrt(info_gain + math.log(1.0 / cfg.delta))
                + (1.0 + math.sqrt(2.0)) * math.sqrt(cfg.lam) * cfg.rkhs_bound)
        beta *= math.sqrt(self._lam / cfg.lam)
        multiplier = {"bbkb": cfg.batch_threshold, "gp-bucb": cfg.batch_threshold,
                      "thompson": 0.1}.get(cfg.strategy, 1.0)
        return cfg.explore * multiplier * beta

    # ------------------------------------------------------------------ hyper-parameters
    def _install_kernel(self, state: KernelState) -> None:
        """Run on ``state``: its lam, kernel and view of the candidates
        (:meth:`KernelTuner.kernel_for`), and GP-UCB / GP-BUCB's exact posterior on them."""
        previous = getattr(self, "_hyper", None)
        self._hyper, self._lam = state, state.lam
        self._kernel, self._X = self._tuner.kernel_for(state)
        changed = previous is None or (previous.lengthscale, previous.lam) != (
            state.lengthscale, state.lam)
        if self.config.strategy in EXACT_STRATEGIES and (self._exact is None or changed):
            self._exact = ExactPosterior(self._kernel, self._X, state.lam)

    def _refit(self, b: int, start: int, dictionary: np.ndarray) -> KernelState:
        """Batch b's hyper-parameters: refit by marginal likelihood when the schedule says so
        (:func:`refit_due`, and REFIT_MIN_ARMS distinct arms observed), on the mean value of
        each distinct arm observed as of its opening, in the batch's units
        (:meth:`_value_scaling`), by :meth:`KernelTuner.refit`."""
        current = self._hyper
        if not self._tuner.fits:
            return current
        observed = self._masks(start, b)[1]
        n = int(np.count_nonzero(observed))
        if not refit_due(current.fitted_at, n):
            return current
        arms, counts, sums = self._counts(observed)
        if len(arms) < REFIT_MIN_ARMS:
            return current
        offset, scale = self._value_scaling(observed)  # the batch's, as the model sees them
        return self._tuner.refit(current, arms, (sums / counts - offset) / scale, n_observed=n,
                                 scale=scale, dictionary=dictionary,
                                 rng=self._rng(STREAM_HYPER, b + 1))
