"""The trial lifecycle, as changes applied inside :meth:`Runtimes.mutate`.

pending (waiting for a worker) -> running (leased; a dispatched trial whose job waits in the
Redis queue has no lease yet) -> completed | failed | abandoned.
A lost lease or a retryable failure sends a running trial back to pending (attempt + 1 at the next
hand-out) until ``max_attempts``; then the engine is told the candidate was abandoned. A release
(a worker that could not run the objective, or a queued trial whose dispatch stopped) sends it
back without counting the attempt. Each function validates its input before it touches the
engine (see service.runtime).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from .engine import ExhaustedError, value_problem
from .errors import Conflict, Invalid, NotFound, ServiceError
from .runtime import StudyRuntime
from .store import queries
from .store.models import Study, Trial

RETRY_AFTER_SECONDS = 1.0
#: The most time one ask spends making new selections (it hands out what it has then, at least
#: one): the study's lock, on SQLite the whole database's write lock, is held meanwhile. 10^4
#: selections took 113 s with gp-ucb on 5000 candidates, ~2 h with go-ucb (quadratic in count).
ASK_SECONDS = 5.0


def _lease(runtime: StudyRuntime, now: datetime) -> datetime:
    return now + timedelta(seconds=float(runtime.spec["lease_seconds"]))


def _trial(session: Session, runtime: StudyRuntime, trial_id: int) -> Trial:
    trial = queries.trial_by_id(session, runtime.study_id, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found in study {runtime.study_id}",
                       field="trial_id")
    return trial


@dataclass
class Asked:
    """What one ask handed out (the batches it opened reach Runtimes' ``on_opened``)."""

    trials: list[Trial]
    waiting: str | None = None


def ask(session: Session, runtime: StudyRuntime, study: Study, *, worker_id: str, count: int,
        now: datetime, held: list[Trial] | None = None) -> Asked:
    """Trials for ``worker_id``: its running ones (``held``, if the caller has just read them),
    then requeued ones, then new selections."""
    if study.status != "active":
        raise Conflict(f"study {study.id} is {study.status}; resume it to ask for trials",
                       field="status")
    if held is None:
        held = queries.running_for_worker(session, study.id, worker_id)
    out = held[:count]
    for trial in queries.requeued(session, study.id, count - len(out)):
        trial.status, trial.worker_id, trial.attempt = "running", worker_id, trial.attempt + 1
        trial.lease_expires_at, trial.started_at = _lease(runtime, now), now
        out.append(trial)
    asked = Asked(out)
    if len(out) < count and not (out and runtime.strategy.exhausted):
        try:
            out += _new_trials(session, runtime, worker_id, count - len(out), now)
        except ExhaustedError as exc:  # raised before the engine changed: it stays cached
            raise Invalid(str(exc), field=exc.field) from None
    if len(out) < count:
        asked.waiting = runtime.strategy.waiting or (
            f"{len(out)} of {count} trials: every candidate has now been proposed (a "
            "deterministic study proposes each once)" if runtime.strategy.exhausted else
            f"{len(out)} of {count} trials within an ask's {ASK_SECONDS:g} s; ask again for more")
    return asked


def _new_trials(session: Session, runtime: StudyRuntime, worker_id: str, count: int,
                now: datetime) -> list[Trial]:
    strategy = runtime.strategy
    before = strategy.batch
    selections = strategy.ask(count, seconds=ASK_SECONDS)
    if strategy.batch > before:  # the outcomes the engine folded into the batches it opened
        folded = strategy.records["folded"]
        t = np.flatnonzero(folded > before)
        queries.fold_outcomes(session, runtime.study_id, t, folded[t])
    for info in reversed(strategy.batches):  # the batches this ask touched, newest first
        if info.index < max(before, 0):
            break
        queries.save_batch(session, runtime.study_id, info, new=info.index > before, now=now)
    trials = [Trial(study_id=runtime.study_id, t=s.t, candidate=s.arm, batch=s.batch,
                    kind="suggested", status="running", folded=-1, var_start=s.variance,
                    attempt=1, worker_id=worker_id, lease_expires_at=_lease(runtime, now),
                    created_at=now, started_at=now) for s in selections]
    session.add_all(trials)
    session.flush()
    return trials


def complete(session: Session, runtime: StudyRuntime, *, trial_id: int, value: float,
             now: datetime) -> Trial:
    """Record a result; the same value twice is a no-op, a different one a conflict.

    A late result for a trial abandoned when its last lease expired is not lost: the engine was
    already told the candidate was abandoned, so the value enters as an imported observation
    (a new trial, kind "imported") and the abandoned trial keeps it for the record. A trial its
    worker failed for good refuses results (409).
    """
    trial = _trial(session, runtime, trial_id)
    if not _completes(trial, value):
        return trial
    if trial.status == "abandoned":
        import_observations(session, runtime, [(trial.candidate, value)], now)
        trial.value = value
        return trial
    runtime.strategy.tell(trial.t, runtime.sign * value)
    trial.status, trial.value, trial.completed_at = "completed", value, now
    trial.lease_expires_at = None
    return trial


def fail(session: Session, runtime: StudyRuntime, *, trial_id: int, reason: str,
         retryable: bool, now: datetime, worker_id: str | None = None,
         release: bool = False) -> Trial:
    """A failed evaluation, or with ``release`` one never tried (back to the pool, the attempt
    not counted). Only the worker holding the lease (when it names itself) may fail a running
    trial; failing a trial already back in the pool is a no-op."""
    trial = _trial(session, runtime, trial_id)
    if not _fails(trial):
        return trial
    if worker_id is not None and trial.worker_id != worker_id:
        raise Conflict(f"trial {trial_id} is leased to another worker", field="worker_id")
    trial.error = reason
    if release:
        release_trial(trial)
    else:
        _give_back(runtime, trial, retryable=retryable, final_status="failed", now=now)
    return trial


@dataclass(frozen=True)
class Result:
    """One row of a bulk upload (:func:`post_results`): a trial's value, or (``error``) the
    reason its evaluation failed."""

    trial_id: int
    value: float | None = None
    error: str | None = None
    retryable: bool = True
    #: the row's line in an uploaded CSV, which errors then name (not part of the result)
    line: int | None = field(default=None, compare=False)

    def name(self, i: int) -> tuple[str, str]:
        """How errors name row ``i``: its text and the field's prefix."""
        if self.line is not None:
            return f"CSV line {self.line}", f"body.line{self.line}"
        return f"result {i}", f"results.{i}"


def post_results(session: Session, runtime: StudyRuntime, results: list[Result],
                 now: datetime) -> dict[str, int]:
    """Many trials' results at once (a lab's filled-in sheet), all or nothing: each row does
    what :func:`complete` (a value) or :func:`fail` (an error) does for one trial.

    Every row is checked before the engine hears of any, so an error leaves the cached engine
    valid (service.runtime): an unknown trial, or two rows giving one trial different results,
    is Invalid (naming the row), a value for a trial that has another or that failed for good
    a Conflict. A row that changes nothing (the value the trial has, an error for a trial no
    longer running, a repeated row) counts as unchanged: uploading a sheet again is harmless.
    Returns the counts of rows completed, failed and unchanged.
    """
    found = queries.trials_by_ids(session, runtime.study_id, [r.trial_id for r in results])
    first: dict[int, int] = {}
    actions: list[Result] = []
    for i, row in enumerate(results):
        j = first.setdefault(row.trial_id, i)
        text, prefix = row.name(i)
        if j != i:
            if results[j] != row:
                raise Invalid(f"{results[j].name(j)[0]} and {text} give trial {row.trial_id} "
                              "different results", field=prefix)
            continue
        trial = found.get(row.trial_id)
        if trial is None:
            raise Invalid(f"{text}: trial {row.trial_id} not found in study "
                          f"{runtime.study_id}", field=f"{prefix}.trial_id")
        if _result_changes(trial, row, i):
            actions.append(row)
    for row in actions:
        if row.error is None:
            complete(session, runtime, trial_id=row.trial_id, value=float(row.value), now=now)
        else:
            fail(session, runtime, trial_id=row.trial_id, reason=row.error,
                 retryable=row.retryable, now=now)
    completed = sum(row.error is None for row in actions)
    return {"completed": completed, "failed": len(actions) - completed,
            "unchanged": len(results) - len(actions)}


def _result_changes(trial: Trial, row: Result, i: int) -> bool:
    """Whether row ``i`` changes ``trial`` (:func:`_completes` or :func:`_fails`), or the
    error it would raise, naming the row, raised before anything changed."""
    text, prefix = row.name(i)
    if (row.value is None) == (row.error is None):
        raise Invalid(f"{text}: give either a value or an error", field=prefix)
    try:
        return _fails(trial) if row.error is not None else _completes(trial, float(row.value))
    except ServiceError as exc:
        raise type(exc)(f"{text}: {exc}", field=f"{prefix}.{exc.field}") from None


def _completes(trial: Trial, value: float) -> bool:
    """Whether the result ``value`` changes ``trial`` (False: it has that value already), or
    the error :func:`complete` refuses it with, raised before anything changed."""
    if (problem := value_problem(value)) is not None:  # before any row reaches the engine:
        raise Invalid(problem, field="value")  # the error names the row, the engine stays valid
    if trial.status in ("completed", "abandoned") and trial.value is not None:
        if trial.value == value:
            return False
        raise Conflict(f"trial {trial.id} already has the value {trial.value!r}", field="value")
    if trial.status == "failed":
        raise Conflict(f"trial {trial.id} failed; its result is no longer used",
                       field="trial_id")
    return True


def _fails(trial: Trial) -> bool:
    """Whether a failure changes ``trial`` (False: it is no longer running, e.g. back in the
    pool), or the error :func:`fail` refuses it with."""
    if trial.status == "completed":
        raise Conflict(f"trial {trial.id} is already completed", field="trial_id")
    return trial.status == "running"


def release_trial(trial: Trial) -> None:
    """Back to the pool as if never handed out: no evaluation was tried (the next hand-out
    counts the attempt again)."""
    trial.status, trial.worker_id, trial.lease_expires_at = "pending", None, None
    trial.attempt -= 1


def _give_back(runtime: StudyRuntime, trial: Trial, *, retryable: bool, final_status: str,
               now: datetime) -> None:
    """Back to the pool while attempts remain, else tell the engine it is abandoned (the trial
    keeps the id of the worker whose attempt ended it)."""
    trial.lease_expires_at = None
    if retryable and trial.attempt < int(runtime.spec["max_attempts"]):
        trial.status, trial.worker_id = "pending", None
        return
    runtime.strategy.abandon(trial.t)
    trial.status, trial.completed_at = final_status, now


def heartbeat(session: Session, runtime: StudyRuntime, *, trial_id: int,
              worker_id: str | None, now: datetime) -> Trial:
    trial = _trial(session, runtime, trial_id)
    if trial.status != "running":
        raise Conflict(f"trial {trial_id} is {trial.status}, not running", field="trial_id")
    if worker_id is not None and trial.worker_id != worker_id:
        raise Conflict(f"trial {trial_id} is leased to another worker", field="worker_id")
    trial.lease_expires_at = _lease(runtime, now)
    return trial


def reap(session: Session, runtime: StudyRuntime, *, trial_ids: list[int],
         now: datetime) -> int:
    """Expired leases: back to the pool, or abandoned after max_attempts. Returns the count."""
    reaped = 0
    for trial_id in trial_ids:
        trial = queries.trial_by_id(session, runtime.study_id, trial_id)
        if trial is None or trial.status != "running" or trial.lease_expires_at is None \
                or trial.lease_expires_at >= now:
            continue
        trial.error = f"lease expired (attempt {trial.attempt})"
        _give_back(runtime, trial, retryable=True, final_status="abandoned", now=now)
        reaped += 1
    return reaped


def release_queued(session: Session, runtime: StudyRuntime, study: Study, *,
                   trial_ids: list[int]) -> int:
    """Queued trials (dispatched, no lease: no worker took their job) of a study that no longer
    dispatches (its dispatch paused or done, or the study paused) go back to the pool, so that
    nothing waits for jobs that may never run (Redis emptied meanwhile, or removed). A job still
    queued for one is skipped by the worker that takes it. Returns the count."""
    if study.dispatching:
        return 0
    released = 0
    for trial_id in trial_ids:
        trial = queries.trial_by_id(session, runtime.study_id, trial_id)
        if trial is not None and trial.status == "running" and trial.lease_expires_at is None:
            release_trial(trial)
            released += 1
    return released


def import_observations(session: Session, runtime: StudyRuntime,
                        observations: list[tuple[int, float]], now: datetime,
                        lines: list[int] | None = None) -> int:
    """Warm start: existing (candidate, value) pairs become completed, imported trials. Errors
    name an observation by its index, or by its line in an uploaded CSV (``lines``)."""
    def refused(i: int, why: str, column: str) -> Invalid:
        if lines is None:
            return Invalid(f"observation {i}: {why}", field=f"observations.{i}.{column}")
        return Invalid(f"CSV line {lines[i]}: {why}", field=f"body.line{lines[i]}.{column}")

    n_arms = len(runtime.candidates)
    for i, (arm, value) in enumerate(observations):
        if not 0 <= arm < n_arms:
            raise refused(i, f"candidate {arm} outside 0..{n_arms - 1}", "candidate")
        if (problem := value_problem(value)) is not None:
            raise refused(i, problem, "value")
    rows: list[dict[str, Any]] = []
    for arm, value in observations:
        s = runtime.strategy.observe(arm, runtime.sign * value)
        rows.append(dict(study_id=runtime.study_id, t=s.t, candidate=s.arm, batch=s.batch,
                         kind="imported", status="completed", value=value, folded=-1,
                         var_start=s.variance, attempt=0, created_at=now, completed_at=now))
    queries.insert_trials(session, rows)
    return len(rows)
