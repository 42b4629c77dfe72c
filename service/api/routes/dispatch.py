"""Server-side evaluation through Redis: start, pause, resume, and its status."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from ... import dispatch, quotas, studies, trials
from ...errors import Conflict, Invalid
from ...objectives import FORMS, check_fits, check_objective
from ...store import queries
from ...store.models import utcnow
from ..deps import (
    CallerDep,
    MetricsDep,
    OwnerDep,
    ReadSessionDep,
    RuntimesDep,
    SessionDep,
    SettingsDep,
    StudyId,
    WorkerDep,
)
from ..responses import json_answer
from ..schemas import DispatchComplete, DispatchCompleted, DispatchRequest, DispatchStatus
from .studies import owned

router = APIRouter(prefix="/v1/studies/{study_id}/dispatch", tags=["dispatch"])


def _status(session, study, runtimes) -> DispatchStatus:  # type: ignore[no-untyped-def]
    """The dispatch's progress. Pollers (``study.wait``) call this often: the counts are index
    ranges over the unfinished trials, and the finished count comes from the study's engine
    when this process has it current (else one O(trials) count)."""
    plan = study.dispatch or {}
    in_flight = sum(queries.unfinished_counts(session, study.id).values())
    finished, completed = dispatch.outcomes(session, runtimes, study)
    return DispatchStatus(status=plan.get("status"), n_evaluations=plan.get("n_evaluations"),
                          parallelism=plan.get("parallelism"), objective=plan.get("objective"),
                          in_flight=in_flight,
                          finished=finished - int(plan.get("finished_before", 0)),
                          # (a plan stored before completed_before has none)
                          completed=completed - int(plan["completed_before"])
                          if "completed_before" in plan else None)


@router.post("")
def start_dispatch(study_id: StudyId, body: DispatchRequest, owner: OwnerDep,
                   session: SessionDep, runtimes: RuntimesDep, settings: SettingsDep,
                   request: Request) -> DispatchStatus:
    """Evaluate the study's objective on Redis workers until n_evaluations more trials have
    an outcome (counted from now: a second dispatch after a first one evaluates again)."""
    study = owned(session, study_id, owner, lock=True)  # a top-up may be closing the old plan
    objective = body.objective or study.spec.get("objective")
    if not objective:
        raise Invalid(f"an objective {FORMS} is needed", field="objective")
    check_objective(objective, settings.objective_modules, new=body.objective is not None,
                    job_timeout=body.job_timeout)  # (the study's objective too)
    if study.n_candidates:  # (none yet: the dispatch waits for the upload, which checks)
        check_fits(objective, study.n_candidates, study.dim)
    if request.app.state.dispatcher is None:
        raise Conflict("this server has no Redis (set BBKB_REDIS_URL) to dispatch to",
                       field="redis")
    quotas.check_parallelism(session, study, body.parallelism, settings.owner_max_parallelism)
    finished, completed = dispatch.outcomes(session, runtimes, study)  # counted from here
    if study.dispatch and study.dispatch.get("objective") != objective:
        # the old dispatch's queued jobs would run its objective: their trials go back to the
        # pool (a worker that takes such a job skips it) and out again under the new one
        for trial in queries.queued_trials(session, study.id):
            trials.release_trial(trial)
    study.dispatch = body.model_dump() | {
        "objective": objective, "status": "running", "finished_before": finished,
        "completed_before": completed}
    request.app.state.dispatcher.wake.set()
    return _status(session, study, runtimes)


def _set(study_id: int, owner: int, session, runtimes, status: str,  # type: ignore[no-untyped-def]
         objective: str | None = None) -> DispatchStatus:
    study = owned(session, study_id, owner, lock=True)
    verb = {"paused": "pause", "running": "resume"}[status]
    if not study.dispatch:
        raise Conflict(f"study {study_id} has no dispatch to {verb}", field="study_id")
    if study.dispatch.get("status") == "done":  # it would show paused, or run on no budget
        raise Conflict(f"the dispatch of study {study_id} is done: nothing to {verb}; start "
                       f"a new one (POST .../dispatch) to evaluate more", field="study_id")
    if objective is not None and study.dispatch.get("objective") != objective:
        raise Conflict(f"the dispatch of study {study_id} runs "
                       f"{study.dispatch.get('objective')!r}, not {objective!r}",
                       field="objective")
    study.dispatch = {**study.dispatch, "status": status}
    return _status(session, study, runtimes)


@router.post("/pause")
def pause_dispatch(study_id: StudyId, caller: CallerDep, session: SessionDep,
                   runtimes: RuntimesDep, objective: str | None = None) -> DispatchStatus:
    """Enqueue no more trials (those in flight finish). With ``?objective=``, only if the
    dispatch runs that objective (409 otherwise): a worker that cannot run one objective pauses
    its dispatch, never a newer dispatch of another, in one atomic step; a worker key may do
    that (it stops spending the budget on evaluations that would fail), not pause at large."""
    owner = caller.owner if objective is not None else caller.require_owner()
    return _set(study_id, owner, session, runtimes, "paused", objective)


@router.post("/resume")
def resume_dispatch(study_id: StudyId, owner: OwnerDep, session: SessionDep,
                    runtimes: RuntimesDep, settings: SettingsDep,
                    request: Request) -> DispatchStatus:
    study = owned(session, study_id, owner, lock=True)
    plan = study.dispatch
    if plan and plan.get("objective"):  # BBKB_OBJECTIVE_MODULES may have changed since
        check_objective(plan["objective"], settings.objective_modules,
                        job_timeout=int(plan.get("job_timeout", 3600)))
    if plan and plan.get("status") == "paused":
        quotas.check_parallelism(session, study, int(plan.get("parallelism", 8)),
                                 settings.owner_max_parallelism, resume=True)
    status = _set(study_id, owner, session, runtimes, "running")
    if request.app.state.dispatcher is not None:
        request.app.state.dispatcher.wake.set()
    return status


@router.post("/complete", response_model=DispatchCompleted)
def complete_dispatched(study_id: StudyId, body: DispatchComplete, owner: WorkerDep,
                        runtimes: RuntimesDep, metrics: MetricsDep,
                        request: Request) -> Response:
    """A dispatch worker's result and, with ``next``, its next trial (see service.dispatch)."""
    def change(session, runtime, study):  # type: ignore[no-untyped-def]
        trial, job = dispatch.complete_and_next(
            session, runtime, study, trial_id=body.trial_id, value=body.value,
            worker_id=body.worker_id, chain=body.next, now=utcnow())
        return DispatchCompleted(trial=studies.trial_public(
            trial, runtime.parameters(trial.candidate)), next=job)
    answer = runtimes.mutate(study_id, owner, change)
    metrics.results.labels("completed").inc()
    if answer.next is not None:
        metrics.suggestions.inc()
    elif request.app.state.dispatcher is not None:
        request.app.state.dispatcher.wake.set()  # a slot is free, or the dispatch may be done
    return json_answer(answer)


@router.get("")
def get_dispatch(study_id: StudyId, owner: WorkerDep, session: ReadSessionDep,
                 runtimes: RuntimesDep) -> DispatchStatus:
    return _status(session, owned(session, study_id, owner), runtimes)
