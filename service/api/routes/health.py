"""Liveness and readiness probes."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from ...store.database import error_line
from ..probes import shared

router = APIRouter(tags=["health"])

#: How long /readyz waits for the database's answer (a database that hangs, or a connection
#: pool that is exhausted, is not ready: the probe says so rather than hang with it).
READY_DEADLINE_SECONDS = 5.0


@router.get("/healthz")
def get_health() -> dict[str, str]:
    """Alive: the process answers (HEAD too, for probes that send it)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {
    "description": "not ready: {status: unavailable, detail: why}"}})
async def get_ready(request: Request) -> JSONResponse:
    """Ready when the database answers ``SELECT 1`` within :data:`READY_DEADLINE_SECONDS`, in
    a read-only session (on SQLite a WAL snapshot: a writer holding the database's lock, as an
    ask may for seconds, does not make the server unready); probes that come while one runs
    share its answer."""
    try:
        await asyncio.wait_for(shared(request.app, "ready_probe", lambda: _select(request.app)),
                               timeout=READY_DEADLINE_SECONDS)
    except TimeoutError:
        return _unavailable(f"the database did not answer within {READY_DEADLINE_SECONDS:g} s")
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
        return _unavailable(f"{type(exc).__name__}: {error_line(exc)}")
    return JSONResponse({"status": "ready"})


def _select(app: FastAPI) -> None:
    with app.state.read_sessions() as session:
        session.execute(text("SELECT 1"))


def _unavailable(detail: str) -> JSONResponse:
    return JSONResponse({"status": "unavailable", "detail": detail}, status_code=503)


for _path, _probe in (("/healthz", get_health), ("/readyz", get_ready)):  # probes that send HEAD
    router.add_api_route(_path, _probe, methods=["HEAD"], include_in_schema=False)
