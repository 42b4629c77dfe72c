"""The state of the Redis queue the server dispatches to: jobs waiting, workers alive."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from redis import RedisError

from ...dispatch import PROBE_DEADLINE_SECONDS, job_study
from ...store import queries
from ...store.database import transaction
from ..deps import WorkerDep
from ..probes import shared
from ..schemas import QueueState

router = APIRouter(prefix="/v1", tags=["dispatch"])


@router.get("/queue")
async def get_queue(request: Request, owner: WorkerDep) -> QueueState:
    """Jobs waiting, being evaluated and failed in the workers' queue, and the live workers.
    Always 200: ``redis`` says whether this server has Redis and whether it answered (each
    command within 2 s, the whole probe within 4 s), so a dashboard can show an outage instead
    of an error."""
    if request.app.state.dispatcher is None:
        return QueueState(redis="not configured")
    try:  # (the probe goes on after a timeout; the next requests share it)
        state = await asyncio.wait_for(_probe(request.app), timeout=PROBE_DEADLINE_SECONDS)
    except TimeoutError:
        return QueueState(redis="unreachable", detail="Redis answers too slowly: the queue's "
                          f"state took over {PROBE_DEADLINE_SECONDS:g} s")
    except RedisError as exc:
        return QueueState(redis="unreachable", detail=f"{type(exc).__name__}: {exc}")
    workers = await run_in_threadpool(own_jobs, request.app, owner, state["workers"])
    return QueueState(redis="ok", **{**state, "workers": workers})


def own_jobs(app: FastAPI, owner: int, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``workers`` with each current job shown only if it evaluates a study of ``owner``: one
    pool of workers serves every owner, and a job id names its study (new dicts: the probe's
    answer is shared between requests)."""
    studies = {w["current_job"]: job_study(w["current_job"]) for w in workers
               if w["current_job"]}
    mine: set[int] = set()
    if any(studies.values()):
        with transaction(app.state.read_sessions) as session:
            mine = queries.owned_study_ids(session, owner, set(studies.values()) - {None})
    return [{**w, "current_job": w["current_job"] if studies.get(w["current_job"]) in mine
             else None} for w in workers]


async def _probe(app: FastAPI) -> dict[str, Any]:
    """The queue's state, one probe at a time (:func:`probes.shared`)."""
    return await shared(app, "queue_probe", app.state.dispatcher.queue_state)
