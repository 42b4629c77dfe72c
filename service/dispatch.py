"""Server-side evaluation through Redis (RQ): keep a study's jobs in flight.

For a study with an objective and dispatch ``running``, :meth:`Dispatcher.top_up` asks the
engine for trials (each named for the RQ job that carries it:
``rq-bbkb-<study>-<trial>-<attempt>-<hex>``, new at every hand-out) and enqueues one RQ job per
trial: up to the
study's parallelism in async mode, the whole batch in sync mode. Counting and asking happen
inside the study's lock (Runtimes.mutate), so several server processes never over-dispatch;
jobs are enqueued after the commit. The database stays the truth: :meth:`Dispatcher.repair`
re-enqueues running trials whose job is missing from Redis (Redis restarted or flushed), under
a new job name (``...-r<hex>``) taken under the lock, so that two server processes repairing
at once enqueue a trial once; requeued trials (lost leases) are handed out again by the next
top-up.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from datetime import datetime, timedelta
from itertools import compress
from typing import Any

from sqlalchemy.orm import Session

from . import trials
from .engine import EngineConfig
from .errors import Invalid, ServiceError
from .objectives import check_objective
from .runtime import Runtimes
from .store import queries
from .store.database import database_down, error_line, lock_study, transaction
from .store.models import Study, Trial, utcnow

log = logging.getLogger("bbkb.dispatch")
QUEUE = "bbkb"
PREFIX = "rq-"
#: A trial handed out this recently may not be enqueued yet (the enqueue follows the commit):
#: repair leaves it alone, so that another server process does not enqueue it a second time.
REPAIR_GRACE_SECONDS = 10.0
#: RQ job statuses after which a job carries no trial any more.
ENDED = ("finished", "failed", "stopped", "canceled")
#: A job this process has seen "started" for this long while its trial has no lease lost its
#: worker before the first heartbeat landed (a live worker's lands within its backoff, at most
#: 10 s apart, or the worker fails the job when its retries run out): repaired. RQ would keep
#: it "started" for an hour (job_timeout + 60). A live worker's late heartbeat then finds its
#: trial renamed (a 409) and skips it before evaluating: nothing is evaluated twice. Timed on
#: this process's clock (RQ's started_at is the worker's).
UNTAKEN_SECONDS = 60.0
#: The dispatcher's Redis commands time out after this long (a pass then ends, the next
#: retries), seconds.
REDIS_SECONDS = 10.0
#: Connect and read timeout of each command of the queue-state probe (GET /v1/queue), and the
#: probe's whole deadline (about 4 + 3 round trips per worker), seconds.
PROBE_SECONDS = 2.0
PROBE_DEADLINE_SECONDS = 4.0


def job_id(trial: Trial, tag: str = "") -> str:
    """A new job's id for ``trial``, unique: a released trial (a pause) keeps its attempt when
    handed out again, and its old job, still queued, must not pass for the new one."""
    return f"bbkb-{trial.study_id}-{trial.id}-{trial.attempt}-{tag}{uuid.uuid4().hex[:8]}"


#: A job id's study (:func:`job_id`'s form).
_JOB_STUDY = re.compile(r"bbkb-(\d{1,10})-")


def job_study(job: str) -> int | None:
    """The study of an evaluation job's id (:func:`job_id`), None for another job."""
    found = _JOB_STUDY.match(job)
    return int(found.group(1)) if found else None


def payload(runtime, trial: Trial, plan: dict[str, Any]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """What a worker needs to evaluate a trial (schemas.DispatchJob)."""
    return {"study_id": trial.study_id, "trial_id": trial.id, "worker_id": trial.worker_id,
            "candidate": trial.candidate,
            "vector": runtime.candidates[trial.candidate].tolist(),
            "parameters": runtime.parameters(trial.candidate),
            "objective": plan["objective"], "job_id": trial.worker_id[len(PREFIX):],
            "lease_seconds": float(runtime.spec["lease_seconds"]),
            "job_timeout": int(plan.get("job_timeout", 3600))}


def remaining(plan: dict[str, Any], done: int, in_flight: int) -> int:
    """Evaluations the dispatch still has to hand out: its ``n_evaluations`` count from its
    start (``finished_before``: the study's outcomes then; absent in plans stored before it
    was kept, whose n_evaluations counted the study's whole history)."""
    return int(plan["n_evaluations"]) + int(plan.get("finished_before", 0)) - done - in_flight


def _in_flight(session: Session, study_id: int) -> int:
    """Trials of the study running on Redis workers."""
    return len(queries.running_on(session, study_id, PREFIX))


def _waiting_for_its_batch(session: Session, study_id: int) -> bool:
    """Whether a sync study can hand out nothing: its batch is out (closed by the stopping
    rule), trials of it still run, and none was given back to the pool."""
    if not queries.latest_batch_closed(session, study_id):
        return False
    unfinished = queries.unfinished_counts(session, study_id)
    return bool(unfinished.get("running")) and not unfinished.get("pending")


def _exhausted(session: Session, runtimes: Runtimes, study: Study) -> bool:
    """Whether a deterministic study has had every candidate proposed or imported: from its
    engine when this process has it current (a hint, as :func:`finished`'s), else one
    O(trials) count of its distinct candidates."""
    cached = runtimes.exhausted(study.id, study.version)
    if cached is not None:
        return cached
    return queries.distinct_candidates(session, study.id) >= study.n_candidates


def outcomes(session: Session, runtimes: Runtimes, study: Study) -> tuple[int, int]:
    """Suggested trials of the study with an outcome, and of those the completed ones: from
    its engine when this process has it current (read without the study's lock: a hint),
    else one O(trials) count."""
    cached = runtimes.outcomes(study.id, study.version)
    return cached if cached is not None else queries.suggested_outcomes(session, study.id)


class Dispatcher:
    """Enqueues evaluation jobs for dispatching studies; one per server process."""

    def __init__(self, runtimes: Runtimes, sessions: Any, read_sessions: Any, redis_url: str,
                 objective_modules: tuple[str, ...] = (), *, bounded: bool = False) -> None:
        from redis import Redis
        from rq import Queue

        self.runtimes, self.sessions = runtimes, sessions
        # the passes' listings only read: on SQLite a write session would take the write lock
        # (BEGIN IMMEDIATE) at every pass, i.e. at every result, and make API writers wait
        self.read_sessions = read_sessions
        self.objective_modules = objective_modules  # BBKB_OBJECTIVE_MODULES
        #: every dispatch holds to its parallelism, sync ones too (which otherwise hand out
        #: whole batches): set with BBKB_OWNER_MAX_PARALLELISM, which counts parallelism
        self.bounded = bounded
        self.redis = Redis.from_url(redis_url, socket_connect_timeout=REDIS_SECONDS,
                                    socket_timeout=REDIS_SECONDS)  # a hang must end
        self.queue = Queue(QUEUE, connection=self.redis)
        self.wake = threading.Event()
        #: per study, its jobs seen "started" with no trial taken, and since when (monotonic)
        self._started: dict[int, dict[str, float]] = {}
        #: for GET /v1/queue: a request must not hang on a Redis that does not answer
        self.probe = Redis.from_url(redis_url, socket_connect_timeout=PROBE_SECONDS,
                                    socket_timeout=PROBE_SECONDS)

    def close(self) -> None:
        """Close the Redis connections (the app's shutdown)."""
        self.redis.close()
        self.probe.close()

    def queue_state(self) -> dict[str, Any]:
        """The workers' queue as Redis holds it: jobs waiting, being evaluated and failed, and
        the live workers listening on it (RQ's registries; a worker missing its heartbeats
        drops out of RQ's list). Raises redis.RedisError if Redis does not answer."""
        from rq import Queue, Worker

        queue = Queue(QUEUE, connection=self.probe)
        workers = Worker.all(connection=self.probe, queue=queue)
        return {"queued": queue.count,  # (a read: no registry cleanup, which may fail jobs)
                "started": queue.started_job_registry.get_job_count(cleanup=False),
                "failed": queue.failed_job_registry.get_job_count(cleanup=False),
                "workers": sorted(({"name": w.name, "state": _state(w),
                                    "current_job": w.get_current_job_id(),
                                    "last_heartbeat": w.last_heartbeat} for w in workers),
                                  key=lambda w: w["name"])}

    def studies(self) -> list[int]:
        """The studies whose dispatch runs. One whose objective's module BBKB_OBJECTIVE_MODULES
        no longer allows (started before the list changed) is paused instead: the workers
        would fail every trial for good (resuming it is refused until the module is listed)."""
        with transaction(self.read_sessions) as session:
            rows = queries.dispatching_studies(session)
            running = {s.id: s.dispatch["objective"] for s in rows if s.dispatching}
        for study_id, objective in list(running.items()):
            try:
                check_objective(objective, self.objective_modules)
            except Invalid as exc:
                del running[study_id]
                self._pause(study_id, objective, exc)
        return list(running)

    def _pause(self, study_id: int, objective: str, reason: Exception) -> None:
        """Pause a running dispatch of ``objective``, under the study's lock (a dispatch the
        user started meanwhile, or one already paused, is left as it is)."""
        with transaction(self.sessions) as session:
            lock_study(session, study_id)
            study = session.get(Study, study_id)
            plan = study.dispatch or {} if study is not None else {}
            if plan.get("status") == "running" and plan.get("objective") == objective:
                study.dispatch = {**plan, "status": "paused"}
                log.warning("dispatch of study %d paused: %s", study_id, reason)

    def top_up(self, study_id: int) -> int:
        """Enqueue jobs until the study's in-flight count reaches its target; returns how many."""
        if not self._due(study_id):
            return 0
        handed = self.runtimes.mutate(study_id, None, self._ask)
        for job in handed:
            self._enqueue(job)
        return len(handed)

    def _enqueue(self, job: dict[str, Any]) -> None:
        self.queue.enqueue("workers.job.evaluate_trial", job, job_id=job["job_id"],
                           job_timeout=job["job_timeout"], result_ttl=600, failure_ttl=3600)

    def _due(self, study_id: int) -> bool:
        """Whether a top-up can change anything, read without the study's lock: an idle pass
        must not bump the study's version, which makes every other server process rebuild its
        engine from the database. Async: a free slot. Sync: not waiting for its batch
        (:func:`_waiting_for_its_batch`), and a free slot if :attr:`bounded`."""
        with transaction(self.read_sessions) as session:
            study = session.get(Study, study_id)
            if study is None or (study.dispatch or {}).get("status") != "running":
                return False
            plan, spec = study.dispatch, study.spec
            in_flight = _in_flight(session, study_id)
            done, _ = outcomes(session, self.runtimes, study)
            engine = EngineConfig.from_dict(spec["engine"])
            sync = engine.mode == "sync"
            waiting = sync and _waiting_for_its_batch(session, study_id)
            exhausted = engine.deterministic and _exhausted(session, self.runtimes, study)
            if exhausted and queries.requeued(session, study_id, 1):
                exhausted = False  # trials returned to the pool are still to hand out
        if remaining(plan, done, in_flight) <= 0 or exhausted:
            return in_flight == 0  # then the top-up marks the dispatch done
        return self._slots(plan, in_flight, sync) > 0 and not waiting

    def _slots(self, plan: dict[str, Any], in_flight: int, sync: bool) -> int:
        """How many trials a top-up may hand out: the dispatch's free slots, or a whole batch
        (up to 10^4) in sync mode unless :attr:`bounded`."""
        if sync and not self.bounded:
            return 10_000
        return int(plan.get("parallelism", 1)) - in_flight

    def _ask(self, session, runtime, study) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
        plan = study.dispatch or {}
        if plan.get("status") != "running":  # paused or stopped since _due read it unlocked
            return []
        in_flight, done = _in_flight(session, study.id), runtime.strategy.resolved()
        budget = remaining(plan, done, in_flight)
        if budget <= 0 and in_flight == 0:
            study.dispatch = {**plan, "status": "done"}
        sync = runtime.strategy.config.mode == "sync"
        want = min(budget, self._slots(plan, in_flight, sync))
        if want <= 0:
            return []
        try:
            asked = trials.ask(session, runtime, study, count=want, now=utcnow(), held=[],
                               worker_id=f"{PREFIX}{uuid.uuid4().hex[:12]}")  # holds no trial
        except Invalid:
            if not runtime.strategy.exhausted:
                raise
            if in_flight == 0:  # deterministic: every candidate proposed, and evaluated
                study.dispatch = {**plan, "status": "done"}
            return []
        for trial in asked.trials:  # one worker id per job: the job's chained trials share it
            trial.worker_id = PREFIX + job_id(trial)
            # no lease while the job waits in the queue (it could expire there, and the trial
            # be handed out again): the worker that takes the job starts it with a heartbeat
            trial.lease_expires_at = None
        return [payload(runtime, t, plan) for t in asked.trials]

    def repair(self, study_id: int) -> int:
        """Re-enqueue queued trials (running, no lease yet: no worker has taken their job) whose
        job Redis no longer has (e.g. after a flush or a restart), or whose job ended or was
        started long ago without taking the trial (its worker died before its first heartbeat
        landed: :data:`UNTAKEN_SECONDS`). A trial a worker has
        taken is left to its lease: its worker may still be evaluating it. Redis is asked after
        the database read, outside its transaction."""
        with transaction(self.read_sessions) as session:
            queued = queries.unleased_queued(
                session, study_id, PREFIX, utcnow() - timedelta(seconds=REPAIR_GRACE_SECONDS))
        if not queued:
            return 0
        lost = dict(compress(queued, self._lost(study_id,
                                                [w[len(PREFIX):] for _, w in queued])))
        if not lost:
            return 0
        handed = self.runtimes.mutate(study_id, None,
                                      lambda s, r, study: self._renamed(s, r, study, lost))
        for job in handed:
            self._enqueue(job)
        if handed:
            log.warning("re-enqueued %d trial(s) of study %d whose job was lost (missing from "
                        "Redis, ended, or its worker gone before taking it)", len(handed),
                        study_id)
            started = self._started.get(study_id, {})
            self._end_untaken({old: p for p in handed
                               if (old := lost[p["trial_id"]][len(PREFIX):]) in started})
        return len(handed)

    def _end_untaken(self, replaced: dict[str, dict[str, Any]]) -> None:
        """End the jobs of workers gone before taking their trial (``replaced``: each job's id,
        and the payload of the job now carrying its trial) as RQ's clean-up ends a job whose
        worker died, an hour sooner: out of RQ's started-job registry (entries "<job id>:<its
        execution id>"; GET /v1/queue counted them as being evaluated), and failed, with the
        reason in RQ's failed-job registry and as the job's latest result. RQ's clean-up, which
        finds jobs by that registry, never would: their hash said "started" until it expired.
        A job its worker ended meanwhile (no longer "started", or written while this reads it:
        WATCHed) keeps its own outcome. A worker alive after all, whose heartbeat finds its
        trial renamed, finishes the job as usual: RQ marks it finished with its result (it
        stays in the failed-job registry until its failure_ttl, as a job RQ's clean-up failed
        whose worker was only slow)."""
        key = self.queue.started_job_registry.key
        for job_id, successor in replaced.items():
            entries = [entry for entry, _ in self.redis.zscan_iter(key, match=f"{job_id}:*")]
            reason = (f"its worker took no trial in {UNTAKEN_SECONDS:g} s (gone before its "
                      f"first heartbeat landed): the server re-enqueued trial "
                      f"{successor['trial_id']} as job {successor['job_id']}")
            for _ in range(3):  # a worker wrote the job while this read it: read it again
                if self._fail_started(job_id, entries, reason):
                    break

    def _fail_started(self, job_id: str, entries: list[bytes], reason: str) -> bool:
        """In one transaction, take the job's ``entries`` out of RQ's started-job registry and,
        if RQ still has it "started", fail it with ``reason``; False if the job was written
        meanwhile (nothing done)."""
        from redis import WatchError
        from rq.exceptions import NoSuchJobError
        from rq.job import Job, JobStatus
        from rq.results import Result

        with self.redis.pipeline() as pipe:
            try:
                pipe.watch(Job.key_for(job_id))
                try:
                    job: Job | None = Job.fetch(job_id, connection=self.redis)
                except NoSuchJobError:
                    job = None
                pipe.multi()
                pipe.zrem(self.queue.started_job_registry.key, job_id, *entries)
                if job is not None and job.get_status(refresh=False) == JobStatus.STARTED:
                    job.set_status(JobStatus.FAILED, pipeline=pipe)
                    self.queue.failed_job_registry.add(job, ttl=job.failure_ttl,
                                                       exc_string=reason, pipeline=pipe)
                    Result.create_failure(job, job.failure_ttl, reason, pipeline=pipe)
                pipe.execute()
            except WatchError:
                return False
        return True

    def _lost(self, study_id: int, jobs: list[str]) -> list[bool]:
        """For each job of the study (of a trial no worker has taken): whether RQ no longer has
        it, has it ended (finished, failed, stopped, canceled), or has had it started for
        UNTAKEN_SECONDS since this process first saw it so. One pipelined round trip."""
        from rq.job import Job

        pipe = self.redis.pipeline(transaction=False)
        for job in jobs:
            pipe.hget(Job.key_for(job), "status")
        now, seen = time.monotonic(), self._started.get(study_id, {})
        states = [None if s is None else s.decode() for s in pipe.execute()]
        started = {job: seen.get(job, now) for job, state in zip(jobs, states, strict=True)
                   if state == "started"}
        self._started[study_id] = started  # (only the study's jobs started now: no growth)
        return [state is None or state in ENDED
                or (state == "started" and now - started[job] >= UNTAKEN_SECONDS)
                for job, state in zip(jobs, states, strict=True)]

    @staticmethod
    def _renamed(session: Session, runtime, study: Study,  # type: ignore[no-untyped-def]
                 lost: dict[int, str]) -> list[dict[str, Any]]:
        """Jobs for the ``lost`` trials (id: worker id seen without the lock) that still wait
        under that worker id, each renamed for a new job: another server process repairing the
        same trial meanwhile renamed it, so it is enqueued once. None if the dispatch stopped
        meanwhile (the reaper then releases them). The plan is read under the lock."""
        if not study.dispatching:
            return []
        plan = study.dispatch
        now, jobs = utcnow(), []
        for trial_id, worker_id in lost.items():
            trial = session.get(Trial, trial_id)
            if trial.status != "running" or trial.worker_id != worker_id \
                    or trial.lease_expires_at is not None:  # taken meanwhile
                continue
            trial.worker_id = PREFIX + job_id(trial, "r")
            trial.started_at = now  # the grace period before a repair applies to the new job
            jobs.append(payload(runtime, trial, plan))
        return jobs

    def loop(self, stop: threading.Event, interval: float = 0.5) -> None:
        """Top up every dispatching study when woken (a result arrived) or every interval. A
        Redis or a database that does not answer is said once when the server starts or the
        outage begins (a warning, not a traceback per pass) and once when it answers again."""
        from redis import ConnectionError as RedisDown
        from redis import TimeoutError as RedisSlow

        passes, outage, database_out = 0, not self._answers(), False
        if outage:
            log.warning("Redis does not answer: dispatches wait for it")
        while not stop.is_set():
            self.wake.wait(interval)
            self.wake.clear()
            failed = database = None
            try:
                dispatching = self.studies()
            except Exception as exc:  # noqa: BLE001 - keep dispatching after a failed pass
                if database_down(exc):
                    database = exc
                else:
                    log.exception("dispatch pass failed")
                dispatching = []
            for study_id in dispatching:
                try:
                    if passes % 20 == 0:
                        self.repair(study_id)
                    self.top_up(study_id)
                except ServiceError as exc:  # e.g. deleted since the listing
                    log.info("dispatch of study %d skipped: %s", study_id, exc)
                except (RedisDown, RedisSlow) as exc:  # not its other errors: one study's
                    failed = exc
                    break  # the other studies would meet the same outage
                except Exception as exc:  # noqa: BLE001 - one study's failure must not stop
                    if database_down(exc):  # the others; an outage stops them all
                        database = exc
                        break
                    log.exception("dispatch pass of study %d failed", study_id)
            if database is not None:
                if not database_out:
                    log.warning("the database does not answer (%s): dispatches wait for it",
                                error_line(database) or type(database).__name__)
                database_out = True
            elif database_out:
                log.info("the database answers again: dispatching")
                database_out = False
            if failed is not None:
                if not outage:
                    log.warning("Redis does not answer (%s: %s): dispatches wait for it",
                                type(failed).__name__, failed)
                outage = True
            elif outage and self._answers():
                log.info("Redis answers again: dispatching")
                outage = False
            passes += 1

    def _answers(self) -> bool:
        """Whether Redis answers a PING (within PROBE_SECONDS)."""
        from redis import RedisError

        try:
            return bool(self.probe.ping())
        except RedisError:
            return False


def complete_and_next(session: Session, runtime, study: Study, *, trial_id: int, value: float,  # type: ignore[no-untyped-def]
                      worker_id: str, chain: bool, now: datetime) -> tuple[Trial, dict | None]:
    """A dispatch worker's result and, in async dispatch with budget and a free slot, the next
    trial for the same worker, in one transaction. The job goes on with it: no RQ job, Redis
    round trip or dispatcher pass per evaluation. The worker id names the job carrying the
    trial, so :meth:`Dispatcher.repair` still finds it; asking again with the same worker id
    after a retried request returns the same trial (trials.ask is idempotent per worker)."""
    if not worker_id.startswith(PREFIX):
        raise Invalid(f"dispatch worker ids start with {PREFIX!r}", field="worker_id")
    trial = trials.complete(session, runtime, trial_id=trial_id, value=value, now=now)
    if not (chain and study.dispatching and runtime.strategy.config.mode == "async"):
        return trial, None
    plan = study.dispatch
    with session.no_autoflush:  # one flush (completion and next trial) instead of two
        running = [(i, w) for i, w in queries.running_on(session, study.id, PREFIX)
                   if i != trial.id]  # the completion is not flushed yet
        held = [i for i, w in running if w == worker_id]  # a retried request
        if held:
            return trial, payload(runtime, session.get(Trial, held[0]), plan)
        in_flight, done = len(running), runtime.strategy.resolved()
        if in_flight >= int(plan.get("parallelism", 1)) \
                or remaining(plan, done, in_flight) <= 0 \
                or (runtime.strategy.exhausted and not queries.requeued(session, study.id, 1)):
            return trial, None
        asked = trials.ask(session, runtime, study, worker_id=worker_id, count=1, now=now,
                           held=[])
    return trial, (payload(runtime, asked.trials[0], plan) if asked.trials else None)


def _state(worker: Any) -> str:
    """An RQ worker's state as a plain string (RQ returns a WorkerStatus enum or a str, and
    "?" for a worker registered but not yet in a state: "starting")."""
    state = worker.get_state()
    text = str(getattr(state, "value", state))
    return "starting" if text == "?" else text
