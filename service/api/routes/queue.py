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
from ..deps import OwnerDep
from ..schemas import QueueState

router = APIRouter(prefix="/v1", tags=["dispatch"])


@router.get("/queue")
async def get_queue(request: Request, owner: OwnerDep) -> QueueState:
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
    """The queue's state, one probe at a time: requests that come while one runs share its
    answer (a Redis that hangs holds one thread of the pool the API's routes run in, not one
    per request)."""
    loop = asyncio.get_running_loop()
    running: asyncio.Future[dict[str, Any]] | None = getattr(app.state, "queue_probe", None)
    if running is None or running.done() or running.get_loop() is not loop:
        running = asyncio.ensure_future(run_in_threadpool(app.state.dispatcher.queue_state))
        running.add_done_callback(_retrieved)  # no "never retrieved" log if all left
        app.state.queue_probe = running
    return await asyncio.shield(running)


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()
