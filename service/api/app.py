"""The application factory: ``create_app(settings)`` wires store, runtimes, routers, reaper."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi_offline import FastAPIOffline
from sqlalchemy import text
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException
from threadpoolctl import threadpool_limits

from .. import logs, trials
from ..dispatch import Dispatcher
from ..errors import ServiceError
from ..metrics import LatencyMiddleware, Metrics
from ..processes import watch_parent
from ..runtime import Runtimes
from ..settings import Settings
from ..store import queries
from ..store.database import (
    database_down,
    error_line,
    make_engine,
    session_factory,
    transaction,
)
from ..store.migrate import ensure_schema
from ..store.models import Study, utcnow
from . import errors
from .deps import TooLarge
from .guards import RequestGuard
from .routes import account, batches, dispatch, health, history, metrics, queue, studies, ui
from .routes import trials as trial_routes

log = logging.getLogger("bbkb.server")


def reap_expired_leases(app: FastAPI) -> int:
    """One pass of the lease reaper: trials whose lease expired go back to the pool (or are
    abandoned), and so do queued trials of studies that no longer dispatch. A study that fails
    is logged and skipped; the others go on."""
    now = utcnow()
    with transaction(app.state.read_sessions) as session:
        expired, stranded = queries.expired_leases(session, now), queries.stranded_queued(session)
        expired = _heard_out(session, expired, (now - app.state.heard_since).total_seconds())
    reaped = _per_study(app, expired, "reap leases of",
                        lambda ids: lambda s, r, _: trials.reap(s, r, trial_ids=ids, now=now))
    released = _per_study(app, stranded, "release queued trials of",
                          lambda ids: lambda s, r, study: trials.release_queued(
                              s, r, study, trial_ids=ids))
    if released:
        log.info("queued trials released", extra={"trials": released})
    return reaped


def _heard_out(session: Session, expired: list[tuple[int, int]],
               heard_seconds: float) -> list[tuple[int, int]]:
    """The expired leases of studies whose lease is no longer than this process has heard
    workers: since it started, or since its database last came back. Before that it cannot
    tell a dead worker from one whose heartbeats found no server or no database (after an
    outage longer than a lease, the first pass took every trial still being evaluated and
    handed it out again); processes that ran meanwhile reaped the dead ones."""
    lease = {sid: float(session.get(Study, sid).spec["lease_seconds"])
             for sid in {sid for sid, _ in expired}}
    return [(sid, tid) for sid, tid in expired if heard_seconds >= lease[sid]]


def _per_study(app: FastAPI, rows: list[tuple[int, int]], what: str,
               change: Callable[[list[int]], Callable[..., int]]) -> int:
    by_study: dict[int, list[int]] = {}
    for study_id, trial_id in rows:
        by_study.setdefault(study_id, []).append(trial_id)
    done = 0
    for study_id, ids in by_study.items():
        try:
            done += app.state.runtimes.mutate(study_id, None, change(ids))
        except ServiceError as exc:  # e.g. deleted since the listing
            log.info("could not %s study %d: %s", what, study_id, exc)
        except Exception as exc:  # noqa: BLE001 - one study's failure must not stop the others
            if database_down(exc):  # nor can any other's: the pass failed
                raise
            log.exception("could not %s study %d", what, study_id)
    return done


def _reaper_loop(app: FastAPI, stop: threading.Event) -> None:
    """A reaper pass every ``reaper_interval``. While the database is busy or unreachable the
    workers' heartbeats fail as its passes do: once it answers again, the process hears them
    for a lease before it reaps (as after its start), and the outage is logged in two lines,
    not a traceback per pass."""
    unavailable = False
    while not stop.wait(app.state.settings.reaper_interval):
        try:
            if unavailable:  # back only once a write gets through (a heartbeat is a write):
                with transaction(app.state.sessions) as session:  # a pass may write nothing
                    session.execute(text("SELECT 1"))  # (on SQLite: BEGIN IMMEDIATE)
            if reaped := reap_expired_leases(app):
                log.info("expired leases reaped", extra={"trials": reaped})
        except Exception as exc:  # noqa: BLE001 - the reaper must outlive a failed pass
            if not database_down(exc):
                log.exception("lease reaper pass failed")
                continue
            app.state.heard_since = utcnow()
            if not unavailable:
                unavailable = True
                log.warning("the lease reaper finds the database unavailable: no lease is "
                            "reaped until a lease after it answers again (%s)",
                            error_line(exc) or type(exc).__name__)
            continue
        if unavailable:
            unavailable = False
            app.state.heard_since = utcnow()
            log.warning("the lease reaper finds the database available again")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    supervisor = os.environ.get("BBKB_SUPERVISOR_PID")  # bbkb serve with several processes
    if supervisor and supervisor.isdigit():  # stop with it, even if it is SIGKILLed (at once
        watch_parent(int(supervisor))         # if that happened while this one started)
    threadpool_limits(settings.blas_threads, user_api="blas")  # for the whole process
    if settings.log_format is not None:
        logs.configure(settings.log_format, settings.log_level)
    engine = make_engine(str(settings.database_url), settings.database_busy_seconds,
                         settings.database_pool_size, settings.database_max_overflow)
    ensure_schema(engine, auto_upgrade=settings.auto_migrate)
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        threads = [threading.Thread(target=_reaper_loop, args=(app, stop), daemon=True,
                                    name="lease-reaper")]
        if app.state.dispatcher is not None:
            threads.append(threading.Thread(target=app.state.dispatcher.loop, args=(stop,),
                                            daemon=True, name="dispatcher"))
        for thread in threads:
            thread.start()
        yield
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
        engine.dispose()
        if app.state.dispatcher is not None:
            app.state.dispatcher.close()

    # /docs and /redoc from the package's own copies of Swagger UI and ReDoc (fastapi-offline),
    # not a CDN: a lab's or a cluster's network often has no way out
    app = FastAPIOffline(title="bbkb-service", version="0.1.0", lifespan=lifespan,
                         description="Distributed asynchronous batch evaluation driven by BBKB.")
    app.state.settings = settings
    app.state.heard_since = utcnow()  # the reaper's first lease (_heard_out)
    app.state.sessions = session_factory(engine)
    app.state.read_sessions = session_factory(engine, read_only=True)
    app.state.metrics = Metrics()
    app.state.runtimes = Runtimes(app.state.sessions, capacity=settings.cached_studies,
                                  on_opened=app.state.metrics.batches_opened)
    app.state.local_owner = None
    app.state.dispatcher = (Dispatcher(app.state.runtimes, app.state.sessions,
                                       app.state.read_sessions, settings.redis_url,
                                       settings.objective_modules,
                                       bounded=settings.owner_max_parallelism is not None)
                            if settings.redis_url else None)
    app.add_middleware(LatencyMiddleware, metrics=app.state.metrics)
    app.add_middleware(BodySizeLimit, json=settings.max_json_bytes,
                       upload=settings.max_upload_bytes)
    app.add_middleware(RequestGuard, keys=settings.auth == "keys")  # outermost: before any read
    errors.install(app)
    for module in (health, metrics, studies, trial_routes, batches, dispatch, queue, history,
                   account, ui):
        versioned = module.router.prefix.startswith("/v1")
        app.include_router(module.router, responses=errors.RESPONSES if versioned else None)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        """Whoever opens the server's address gets the dashboard (the API: /v1, /docs)."""
        return RedirectResponse("/ui/")
    return app


class BodyTooLarge(TooLarge, HTTPException):
    """413: the body grew past the limit while it was read. An HTTPException so that FastAPI's
    body parsing passes it on (another error there becomes its 400 "error parsing the body");
    ServiceError first in the MRO, so the app's handler answers ``{detail, field}``."""

    def __init__(self, limit: int) -> None:  # not cooperative: ServiceError's super() is
        message = f"body larger than {limit} bytes"  # HTTPException's __init__ here
        HTTPException.__init__(self, 413, message)
        self.args, self.field = (message,), "body"

    def __str__(self) -> str:  # HTTPException's is "413: <detail>"
        return str(self.detail)


#: The routes whose bodies are a few fields (an ask, a result, a heartbeat, a dispatch's plan),
#: by their path's last segment, and their limit: a 256 MB body there was parsed in full.
SMALL_BODIES = frozenset({"suggestions", "complete", "fail", "heartbeat", "pause", "resume",
                          "dispatch"})
SMALL_BODY_BYTES = 1024**2


class BodySizeLimit:
    """413 ``{detail, field}`` for bodies over the limit: ``upload`` bytes for the .npy upload
    (``PUT .../candidates``), 1 MiB for :data:`SMALL_BODIES`, ``json`` (at most ``upload``) for
    every other route. A declared
    Content-Length is refused before the app runs; a chunked body (none declared) is counted as
    it arrives, and the read that passes the limit raises :class:`BodyTooLarge` in the app, whose
    handler answers. Nothing is buffered here."""

    def __init__(self, app, json: int, upload: int) -> None:  # type: ignore[no-untyped-def]
        self.app, self.json, self.upload = app, min(json, upload), upload

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        last = scope["path"].rstrip("/").rsplit("/", 1)[-1]
        limit = (self.upload if last == "candidates" else
                 min(self.json, SMALL_BODY_BYTES) if last in SMALL_BODIES else self.json)
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await _too_large(limit)(scope, receive, send)
            return
        if scope["method"] not in ("POST", "PUT", "PATCH"):  # no route reads their body; a
            await self.app(scope, receive, send)  # streamed answer's listener drains it
            return
        size, started = 0, False

        async def counted() -> dict:  # type: ignore[type-arg]
            nonlocal size
            message = await receive()
            if message["type"] == "http.request" and not started:
                size += len(message.get("body", b""))
                if size > limit:  # answering, a read only listens for the client's disconnect
                    raise BodyTooLarge(limit)
            return message

        async def sending(message: dict) -> None:  # type: ignore[type-arg]
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, sending)
        except BodyTooLarge:  # read outside the app's handlers: answered here if still possible
            if started:
                raise
            await _too_large(limit)(scope, receive, send)


def _too_large(limit: int) -> JSONResponse:
    return errors.error_response(413, f"body larger than {limit} bytes", "body")
