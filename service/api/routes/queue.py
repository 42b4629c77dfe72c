"""The state of the Redis queue the server dispatches to: jobs waiting, workers alive."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from redis import RedisError

from ..deps import OwnerDep
from ..schemas import QueueState

router = APIRouter(prefix="/v1", tags=["dispatch"])


@router.get("/queue")
async def get_queue(request: Request, owner: OwnerDep) -> QueueState:
    """Jobs waiting, being evaluated and failed in the workers' queue, and the live workers.
    Always 200: ``redis`` says whether this server has Redis and whether it answered (within
    a 2 s timeout), so a dashboard can show an outage instead of an error."""
    dispatcher = request.app.state.dispatcher
    if dispatcher is None:
        return QueueState(redis="not configured")
    try:
        state = await run_in_threadpool(dispatcher.queue_state)
    except RedisError as exc:
        return QueueState(redis="unreachable", detail=f"{type(exc).__name__}: {exc}")
    return QueueState(redis="ok", **state)
