"""Typed dependencies of the route handlers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from sqlalchemy.orm import Session

from ..auth import LOCAL_OWNER, Caller, authenticate, owner_id_for
from ..errors import ServiceError
from ..metrics import CALLER, Metrics
from ..runtime import Runtimes
from ..settings import Settings
from ..store.database import transaction


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_runtimes(request: Request) -> Runtimes:
    return request.app.state.runtimes


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request, committed before the response is sent (function scope)."""
    with transaction(request.app.state.sessions) as session:
        yield session


def get_read_session(request: Request) -> Iterator[Session]:
    """A session of a route that only reads: on SQLite it takes no write lock."""
    with transaction(request.app.state.read_sessions) as session:
        yield session


class TooLarge(ServiceError):
    status_code = 413


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, streamed; 413 once it exceeds ``limit`` bytes (a chunked body has no
    Content-Length for the size middleware to check)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"body larger than {limit} bytes", field="body")
        chunks.append(chunk)
    return b"".join(chunks)


def validated(validate: Callable[[Any], Any], data: Any, offset: int | None = None,
               rows: str = "observations") -> Any:
    """``validate(data)``; its errors answer as FastAPI's own body validation does (the rows of a
    chunk that starts at ``offset`` are located in the whole list ``rows``)."""
    try:
        return validate(data)
    except ValidationError as exc:
        raise RequestValidationError([
            {**e, "loc": ("body", *e["loc"]) if offset is None else
             ("body", rows, offset + e["loc"][0], *e["loc"][1:])}
            for e in exc.errors(include_url=False)]) from exc


#: The Bearer scheme, declared for the OpenAPI schema (/docs' Authorize button, generated
#: clients); the header itself is read as sent, so that a 401 can say what is wrong with it.
BEARER = HTTPBearer(auto_error=False, description="An API key (`bbkb keys create --owner NAME`); "
                    "not needed with BBKB_AUTH=none.")


async def get_caller(request: Request,
                     _: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]
                     ) -> Caller:
    """The caller's owner and key scope; the database is read in the thread pool, never on
    the loop."""
    state = request.app.state
    if state.settings.auth == "none" and state.local_owner is not None:
        caller = Caller(state.local_owner)
    else:
        caller = await run_in_threadpool(_caller, request, request.headers.get("authorization"))
    request.scope[CALLER] = caller  # for the access log (service.metrics.LatencyMiddleware)
    return caller


def _caller(request: Request, authorization: str | None) -> Caller:
    state = request.app.state
    if state.settings.auth == "none":  # the first request: the local owner may be created
        with transaction(state.sessions) as session:
            state.local_owner = owner_id_for(session, LOCAL_OWNER)
        return Caller(state.local_owner)
    with transaction(state.read_sessions) as session:  # on SQLite: waits for no writer
        return authenticate(session, authorization)


async def get_owner(caller: Annotated[Caller, Depends(get_caller)]) -> int:
    """The owner id of an owner key; a worker key is a 403 (the routes that decide what is
    evaluated: create, upload, pause, resume, delete, dispatch, import)."""
    return caller.require_owner()


async def get_worker_owner(caller: Annotated[Caller, Depends(get_caller)]) -> int:
    """The owner id of any key, a worker key included: the routes that read, and those by which
    a worker asks for, heartbeats and reports trials."""
    return caller.owner


SettingsDep = Annotated[Settings, Depends(get_settings)]
RuntimesDep = Annotated[Runtimes, Depends(get_runtimes)]
# scope="function": the commit runs when the handler returns, not after the response went out
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
OwnerDep = Annotated[int, Depends(get_owner)]
#: The caller itself, for a route whose scope depends on its arguments (Caller.require_owner).
CallerDep = Annotated[Caller, Depends(get_caller)]
#: Any key of the owner, a worker key included (reads, and the workers' trial routes).
WorkerDep = Annotated[int, Depends(get_worker_owner)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]

#: Path identifiers, bounded so that no database integer type can overflow.
#: Study ids are 32-bit integers (the column's type on PostgreSQL).
MAX_STUDY_ID = 2**31 - 1
StudyId = Annotated[int, Path(ge=1, le=MAX_STUDY_ID)]
TrialId = Annotated[int, Path(ge=1, le=2**62)]
#: Keyset pagination of study lists: the last id of the previous page, and the page size
#: asked for (a list answers at most ``BBKB_PAGE_LIMIT``, as the trials' list does).
AfterId = Annotated[int, Query(ge=0, le=MAX_STUDY_ID)]
PageSize = Annotated[int, Query(ge=1, le=10_000)]
