"""The application factory: ``create_app(settings)`` wires store, runtimes, routers, reaper."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from .. import trials
from ..runtime import Runtimes
from ..settings import Settings
from ..store import queries
from ..store.database import make_engine, session_factory, transaction
from ..store.migrate import ensure_schema
from ..store.models import utcnow
from . import errors
from .routes import batches, health, studies
from .routes import trials as trial_routes

log = logging.getLogger("bbkb.server")


def reap_expired_leases(app: FastAPI) -> int:
    """One pass of the lease reaper over every study with expired leases."""
    now = utcnow()
    with transaction(app.state.sessions) as session:
        expired = queries.expired_leases(session, now)
    by_study: dict[int, list[int]] = {}
    for study_id, trial_id in expired:
        by_study.setdefault(study_id, []).append(trial_id)
    reaped = 0
    for study_id, ids in by_study.items():
        reaped += app.state.runtimes.mutate(
            study_id, None, lambda s, r, _, ids=ids: trials.reap(s, r, trial_ids=ids, now=now))
    return reaped


def _reaper_loop(app: FastAPI, stop: threading.Event) -> None:
    while not stop.wait(app.state.settings.reaper_interval):
        try:
            reap_expired_leases(app)
        except Exception:  # noqa: BLE001 - the reaper must outlive a failed pass
            log.exception("lease reaper pass failed")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    engine = make_engine(str(settings.database_url))
    ensure_schema(engine)
    stop = threading.Event()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        reaper = threading.Thread(target=_reaper_loop, args=(app, stop), daemon=True,
                                  name="lease-reaper")
        reaper.start()
        yield
        stop.set()
        reaper.join(timeout=5)
        engine.dispose()

    app = FastAPI(title="bbkb-service", version="0.1.0", lifespan=lifespan,
                  description="Distributed asynchronous batch evaluation driven by BBKB.")
    app.state.settings = settings
    app.state.sessions = session_factory(engine)
    app.state.runtimes = Runtimes(app.state.sessions)
    app.state.local_owner = None
    errors.install(app)
    for module in (health, studies, trial_routes, batches):
        app.include_router(module.router)
    return app
