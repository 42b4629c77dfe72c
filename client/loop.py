"""The managed optimisation loop behind :meth:`Study.optimize`.

``n_workers`` slots evaluate ``fn`` in a thread or process pool; the calling thread does all the
HTTP: each free slot asks for one trial (worker id ``<prefix>-<run>-<slot>``), submits
``fn(**parameters)`` (or ``fn(values)`` with ``vector=True``) and tells the result. In sync mode
the server may answer "waiting" with ``retry_after``: the slot asks again after that long or as
soon as another result is in. Long evaluations get their lease renewed by heartbeats.

An exception in ``fn`` fails the trial as retryable, with the exception's last traceback line as
the reason; a result that is not a finite number fails it for good. The loop ends once
``n_evaluations`` of its trials are completed or failed for good, or earlier, with a warning,
once the study has no candidate left to propose (``deterministic``: each is evaluated once).

A broken ``fn`` (wrong parameter names, a missing file, no ``return``) would fail every trial
for good: after ``max_consecutive_errors`` trials failed in a row (no value between them) the
loop gives the trials back and raises ``fn``'s exception, and a failure that would end a trial
for good waits for the next value unless it is the only one since a value (see
:mod:`client.streak`). ``max_consecutive_errors=None``: every failure counts at once, as before.

While the server is unavailable (a restart), every request of the loop is retried, finished values
are kept until they are posted, and evaluations go on; the loop raises
:class:`~client.errors.ServerUnavailable` only once the server has been unreachable for
``max_outage`` seconds (on top of each request's own retries).
"""

from __future__ import annotations

import logging
import math
import numbers
import pickle
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from service.api.numbers import is_boolean
from service.api.schemas import REASON_LIMIT, VALUE_LIMIT, TrialPublic

from .errors import BBKBError, ConflictError, ServerUnavailable, ValidationError
from .streak import Held, Streak

if TYPE_CHECKING:
    from .study import Study

__all__ = ["OptimizeResult", "optimize"]

log = logging.getLogger("bbkb.client")
R = TypeVar("R")
#: Default of ``max_outage``: how long the loop rides out an unavailable server, in seconds.
MAX_OUTAGE = 120.0
#: Distinct failure reasons of one run logged as warnings (the rest at INFO).
MAX_WARNED_REASONS = 10
#: Default of ``max_consecutive_errors``: failures of ``fn`` in a row that stop the loop.
MAX_CONSECUTIVE_ERRORS = 5


@dataclass(frozen=True)
class OptimizeResult:
    """What :meth:`Study.optimize` did. ``best`` is the study's best trial (all workers)."""

    best: TrialPublic | None
    n_completed: int
    n_failed: int
    n_retried: int
    elapsed: float


def optimize(study: Study, fn: Callable[..., Any], n_evaluations: int, *, n_workers: int = 4,
             executor: Literal["thread", "process"] = "thread", progress: bool = True,
             worker_id_prefix: str = "sdk", vector: bool = False,
             max_outage: float = MAX_OUTAGE,
             max_consecutive_errors: int | None = MAX_CONSECUTIVE_ERRORS) -> OptimizeResult:
    """Run ``fn`` on ``n_evaluations`` trials of ``study`` with ``n_workers`` parallel slots."""
    n_evaluations, n_workers = _count("n_evaluations", n_evaluations), _count("n_workers",
                                                                             n_workers)
    if max_consecutive_errors is not None and not (
            isinstance(max_consecutive_errors, int) and max_consecutive_errors >= 1):
        raise ValueError(f"max_consecutive_errors must be None or an int >= 1, not "
                         f"{max_consecutive_errors!r}")
    outage = Outage(max_outage, study.client.backoff)
    if executor == "process":
        _check_picklable(fn)
        pool: Executor = ProcessPoolExecutor(max_workers=n_workers)
    elif executor == "thread":
        pool = ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="bbkb-eval")
    else:
        raise ValueError(f"executor must be 'thread' or 'process', not {executor!r}")
    start = time.monotonic()
    run = _Run(study, fn, n_evaluations, n_workers, worker_id_prefix, vector, progress, outage,
               max_consecutive_errors)
    try:
        run.loop(pool)
    except BaseException as exc:
        pool.shutdown(wait=False, cancel_futures=True)
        if not isinstance(exc, ServerUnavailable):
            run.give_back("optimize() stopped before the evaluation finished")
        raise
    finally:
        run.bar.close()
    pool.shutdown()  # (no trial is held: held ones count as in progress, settled at the end)
    return OptimizeResult(best=run.call(study.best), n_completed=run.n_completed,
                          n_failed=run.n_failed, n_retried=run.n_retried,
                          elapsed=time.monotonic() - start)


def _count(name: str, value: Any) -> int:
    """``value`` as an int >= 1 (numpy's integers too), else a TypeError or ValueError naming
    ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, not {type(value).__name__} {value!r:.50}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, not {value}")
    return int(value)


def _check_picklable(fn: Callable[..., Any]) -> None:
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise TypeError(f"executor='process' needs a picklable fn (a function defined at the "
                        f"top level of a module, not a lambda, closure or local function); "
                        f"{fn!r} is not: {exc}") from exc


def _evaluate(fn: Callable[..., Any], parameters: dict[str, Any], names: list[str],
              vector: bool) -> Any:
    """Runs in the pool (module level, so process pools can pickle it)."""
    if vector:
        return fn([parameters[name] for name in names])
    return fn(**parameters)


def as_value(result: Any, source: str = "fn") -> tuple[float | None, str | None]:
    """(value, None) for a finite number within +-VALUE_LIMIT (what the server accepts as a
    result), else (None, why not, naming ``source``)."""
    if isinstance(result, str | bytes) or is_boolean(result) or not hasattr(result, "__float__"):
        return None, f"{source} returned {type(result).__name__} {result!r:.100}, not a number"
    try:
        value = float(result)
    except OverflowError:  # an int beyond float64 (its repr may be too long to print)
        return None, (f"{source} returned an integer of {int(result).bit_length()} bits, "
                      f"outside +-{VALUE_LIMIT:g}")
    except (TypeError, ValueError) as exc:
        return None, f"{source} returned {type(result).__name__}, not a number: {exc}"
    if not math.isfinite(value):
        return None, f"{source} returned {value}, not a finite number"
    if abs(value) > VALUE_LIMIT:
        return None, f"{source} returned {value!r}, outside +-{VALUE_LIMIT:g}"
    return value, None


class _Run:
    """The state of one optimize() call; every method runs in the calling thread."""

    def __init__(self, study: Study, fn: Callable[..., Any], n: int, n_workers: int,
                 prefix: str, vector: bool, progress: bool, outage: Outage,
                 max_errors: int | None = MAX_CONSECUTIVE_ERRORS) -> None:
        info = study.info
        self.study, self.fn, self.n, self.vector = study, fn, n, vector
        self.names = list(info.parameter_names)
        self.maximize = info.direction == "maximize"
        self.best = None if info.best is None else info.best.value
        self.beat_every = float(info.spec.get("lease_seconds", 300.0)) / 3
        self.run_name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.workers = [f"{self.run_name}-{slot}" for slot in range(n_workers)]
        self.renamed = 0  # slots given a new worker id (see hold)
        self.free = list(range(n_workers))[::-1]
        self.running: dict[Future[Any], tuple[int, TrialPublic, float]] = {}
        self.n_completed = self.n_failed = self.n_retried = 0
        self.counted: set[int] = set()  # trials whose completion or final failure was counted
        self.reasons: set[str] = set()  # failure reasons already logged as a warning
        self.ask_after = 0.0
        self.said: str | None = None  # the last reason to wait that was logged
        self.batches: dict[int, set[int]] = {}
        self.streak = None if max_errors is None else Streak(
            max_errors, int(info.spec.get("max_attempts", 3)))
        self.bar = _Progress(progress, n, f"study {study.id}")
        self.call = outage.call

    @property
    def n_done(self) -> int:
        return self.n_completed + self.n_failed

    @property
    def n_in_progress(self) -> int:
        """Trials being evaluated and not counted yet (a trial handed again after a lost lease
        runs twice, and one copy may go on after the other's outcome was counted), and the
        held ones, which will be outcomes too: each trial once (a held trial whose lease was
        lost may be handed again to this run)."""
        ids = {trial.id for _, trial, _ in self.running.values()} - self.counted
        return len(ids | set(self.streak.held if self.streak else ()))

    def loop(self, pool: Executor) -> None:
        while self.n_done < self.n:
            self.fill(pool)
            timeout = self.beat_every
            if self.ask_after:
                timeout = min(timeout, max(self.ask_after - time.monotonic(), 0.0))
            if not self.running:
                if self.streak and self.streak.held and (
                        self.ask_after or self.n_done + self.n_in_progress >= self.n):
                    self.settle()  # no value can come: a sync batch waits for them, or
                    continue  # they are all the evaluations left
                time.sleep(min(timeout, 1.0))
                continue
            finished, _ = wait(list(self.running), timeout=timeout, return_when=FIRST_COMPLETED)
            for future in finished:
                self.report(future)
            self.heartbeat()

    def fill(self, pool: Executor) -> None:
        """Ask for a trial for each free slot, unless the server said to wait."""
        if time.monotonic() < self.ask_after:
            return
        self.ask_after = 0.0
        while self.free and self.n_done + self.n_in_progress < self.n:
            slot = self.free[-1]
            try:
                answer = self.call(self.study.ask, self.workers[slot], count=1)
            except ValidationError as exc:  # the server's 422
                if exc.field != "candidates":
                    raise
                # nothing left to propose (a deterministic study has proposed every candidate,
                # or every one failed): the trials in progress finish, and the loop ends
                log.warning("study %d: %s; optimize() ends after %d evaluations", self.study.id,
                            exc, self.n_done + self.n_in_progress)
                self.n = self.n_done + self.n_in_progress
                return
            if not answer.trials:
                self.ask_after = time.monotonic() + (answer.retry_after or 1.0)
                self.wait(answer.waiting)
                return
            self.free.pop()
            trial = answer.trials[0]
            self.batches.setdefault(trial.batch, set()).add(trial.id)
            future = pool.submit(_evaluate, self.fn, trial.parameters, self.names, self.vector)
            self.running[future] = (slot, trial, time.monotonic())
            self.bar.show(self.best, trial.batch, len(self.batches[trial.batch]))

    def wait(self, reason: str | None) -> None:
        """The server has no trial for now (a sync batch waits for its results): say why on
        the bar, and in the log, once, when this run has none of them (they are another
        run's, e.g. one that died, whose leases must run out first)."""
        if reason and reason != self.said and not self.running:
            self.said = reason
            log.info("study %d: no trial for now, and none running here: %s", self.study.id,
                     reason)
        self.bar.wait(reason)

    def report(self, future: Future[Any]) -> None:
        """Tell (or fail) the trial of a finished evaluation."""
        slot, trial, _ = self.running.pop(future)
        self.free.append(slot)
        self.ask_after = 0.0  # a result may release a sync batch: ask again at once
        worker = self.workers[slot]
        try:
            value, problem = as_value(future.result())
        except Exception as exc:  # noqa: BLE001 - fn's errors become failed trials
            reason = traceback.format_exception_only(exc)[-1].strip()
            self.error(trial, reason, exc, retryable=True, slot=slot)
            return
        if value is None:
            problem = problem or "no value"
            self.error(trial, problem, ValueError(problem), retryable=False, slot=slot)
            return
        for held in self.streak.value() if self.streak else ():  # they failed on their own
            self.fail(held.trial, held.reason, retryable=held.retryable, worker=held.worker)
        try:
            self.call(self.study.tell, trial.id, value, worker_id=worker)
        except ConflictError as exc:  # e.g. lease lost and the trial abandoned meanwhile
            log.warning("result of trial %s not used: %s", trial.id, exc)
            return
        if not self.first_outcome(trial):
            return
        self.n_completed += 1
        if self.best is None or (value > self.best if self.maximize else value < self.best):
            self.best = value
        self.bar.advance(self.best)

    def error(self, trial: TrialPublic, reason: str, error: BaseException, *,
              retryable: bool, slot: int) -> None:
        """fn raised ``error`` or returned no number (``reason``; not ``retryable``): fail the
        trial, hold it, or stop the loop, as the streak of failures says (client.streak)."""
        worker = self.workers[slot]
        action = "fail" if self.streak is None else self.streak.failed(trial, retryable)
        if action == "fail":
            self.fail(trial, reason, retryable=retryable, worker=worker)
        elif action == "hold":  # its heartbeats go on; the slot asks under a new worker id
            assert self.streak is not None
            self.streak.held[trial.id] = Held(trial, worker, _reason(reason), retryable, error,
                                              time.monotonic())
            self.renamed += 1
            self.workers[slot] = f"{self.run_name}-{slot}.{self.renamed}"
            log.info("trial %s: %s; held until fn returns a value", trial.id, reason)
        else:
            self.fail(trial, reason, retryable=True, worker=worker, release=True)
            self.stop(error)

    def settle(self) -> None:
        """Judge the held trials without a value to come (a sync batch waits for them, or they
        are the last evaluations): fail them for good if fn returned a value in this run or
        failed on no other trial, else stop."""
        assert self.streak is not None
        if not (self.streak.fn_works or len(self.streak.failing) == 1):
            self.stop()
        for held in self.streak.settle():
            self.fail(held.trial, held.reason, retryable=held.retryable, worker=held.worker)

    def stop(self, error: BaseException | None = None) -> None:
        """Raise ``error`` (default: the latest held one's) with the streak's note; optimize()
        then gives the running and held trials back."""
        assert self.streak is not None
        if error is None:
            error = list(self.streak.held.values())[-1].error
        error.add_note(self.streak.note())
        raise error

    def fail(self, trial: TrialPublic, reason: str, *, retryable: bool, worker: str,
             release: bool = False) -> None:
        reason = _reason(reason)
        try:
            status = self.call(self.study.fail, trial.id, reason, retryable,
                               worker_id=worker, release=release).status
        except BBKBError as exc:  # e.g. a 409 or the server down: its lease will expire instead
            log.warning("could not fail trial %s: %s", trial.id, exc)
            return
        if status == "failed":
            if not self.first_outcome(trial):
                return
            self.n_failed += 1
            self.bar.advance(self.best)
        else:
            self.n_retried += 1
        if reason in self.reasons or len(self.reasons) >= MAX_WARNED_REASONS:
            log.info("trial %s failed (%s): %s", trial.id, status, reason)
            return
        self.reasons.add(reason)  # a broken fn is seen at once, without logging set up
        log.warning("trial %s failed (%s): %s (again: logged at INFO)", trial.id,
                    "for good" if status == "failed" else "given back" if release
                    else "retried", reason)

    def first_outcome(self, trial: TrialPublic) -> bool:
        """Whether ``trial``'s outcome is new to this run. A lost lease hands the trial again
        (attempt + 1), possibly to another slot of this run; the server takes the same value,
        or a final failure, again as a no-op, which counted the trial twice and ended the run
        before ``n_evaluations`` trials were done."""
        if trial.id in self.counted:
            log.info("trial %s was evaluated twice (a lost lease); counted once", trial.id)
            return False
        self.counted.add(trial.id)
        return True

    def heartbeat(self) -> None:
        """Renew the leases of evaluations running for longer than a third of the lease."""
        now = time.monotonic()
        for future, (slot, trial, since) in list(self.running.items()):
            if now - since >= self.beat_every:
                try:
                    self.call(self.study.heartbeat, trial.id, self.workers[slot])
                except ConflictError as exc:
                    log.warning("lease of trial %s lost: %s", trial.id, exc)
                self.running[future] = (slot, trial, now)
        for held in self.streak.held.values() if self.streak else ():
            if now - held.beat >= self.beat_every:
                try:
                    self.call(self.study.heartbeat, held.trial.id, held.worker)
                except ConflictError as exc:
                    log.warning("lease of trial %s lost: %s", held.trial.id, exc)
                held.beat = now

    def give_back(self, reason: str) -> None:
        """Best effort: return unfinished trials to the pool instead of waiting for leases,
        without counting an attempt (``release``: an interrupted evaluation did not fail; with
        ``max_attempts`` 1 it failed the trial for good). Stops at the first unreachable
        server: each call would go through the client's retries (seconds per trial). Held
        trials (client.streak) go back too, with their failure as the reason."""
        held = self.streak.held.values() if self.streak else ()
        for trial, worker, why in [*((trial, self.workers[slot], reason)
                                     for slot, trial, _ in self.running.values()),
                                   *((h.trial, h.worker, h.reason) for h in held)]:
            try:
                self.study.fail(trial.id, why, True, worker_id=worker, release=True)
            except ServerUnavailable:
                break
            except BBKBError:
                pass
        self.running.clear()
        if self.streak:
            self.streak.held.clear()


class Outage:
    """Rides out an unavailable server (a restart) for :func:`optimize` and
    :meth:`Study.wait <client.Study.wait>`: :meth:`call` retries a request, on top of the
    client's own retries, until the server has been unavailable for ``max_outage`` seconds
    (``backoff``: the client's, the first pause between tries, at least 0.05 s), or until the
    ``deadline`` (a time.monotonic() value) of a wait with a timeout has passed."""

    def __init__(self, max_outage: float, backoff: float,
                 deadline: float | None = None) -> None:
        if not max_outage >= 0:
            raise ValueError("max_outage must be >= 0 seconds")
        self.max_outage = max_outage
        self.backoff = max(backoff, 0.05)
        self.deadline = deadline
        self.down_since: float | None = None
        #: When the first attempt of the request that found the server down was sent.
        self.failing_since = 0.0

    def call(self, request: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """``request(*args, **kwargs)``, retried with backoff while the server is unavailable,
        until it has been so for ``max_outage`` seconds."""
        pause = self.backoff
        while True:
            started = time.monotonic()
            try:
                result = request(*args, **kwargs)
            except ServerUnavailable as exc:
                now = time.monotonic()
                if self.down_since is None:  # max_outage counts from here: after the retries
                    self.down_since, self.failing_since = now, started
                if now - self.down_since >= self.max_outage or (
                        self.deadline is not None and now >= self.deadline):
                    raise
                # since the first attempt of the first failed request, its own retries included
                log.warning("server unavailable for %.1f s, retrying: %s",
                            now - self.failing_since, exc)
                time.sleep(pause if self.deadline is None
                           else max(0.0, min(pause, self.deadline - now)))
                pause = min(pause * 2, 10.0)
                continue
            self.down_since = None
            return result


def _reason(text: str) -> str:
    """A failure reason the server takes: NUL escaped, at most REASON_LIMIT characters (an
    error quoting a binary reply, or a long one, made the fail request invalid and stopped
    optimize() with the trial still leased)."""
    text = text.replace("\x00", "\\x00")
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "\u2026"


class _Progress:
    """A tqdm bar (evaluations, best value, current batch and its size, and why the server has
    no trial for now), or nothing."""

    def __init__(self, enabled: bool, total: int, desc: str) -> None:
        self.bar: Any = None
        self.best: float | None = None
        self.batch = ""
        self.waiting: str | None = None  # why the server has no trial for now
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, desc=desc, unit="eval")

    def show(self, best: float | None, batch: int, size: int) -> None:
        self.best, self.batch, self.waiting = best, f"{batch} ({size} trials)", None
        self._postfix()

    def wait(self, reason: str | None) -> None:
        if reason != self.waiting:
            self.waiting = reason
            self._postfix()

    def advance(self, best: float | None) -> None:
        self.best = best
        if self.bar is not None:
            self.bar.update(1)
            self._postfix()

    def _postfix(self) -> None:
        if self.bar is not None:
            shown = {"best": "-" if self.best is None else f"{self.best:.6g}",
                     "batch": self.batch} | ({"waiting": self.waiting} if self.waiting else {})
            self.bar.set_postfix(shown, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
