"""Prometheus metrics: request latencies, suggestions, results, batches, resparsification time.

One registry per app (so several apps in one test process do not collide). With several uvicorn
worker processes each process reports its own numbers, as usual for Prometheus' client.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from .engine import BatchInfo

if TYPE_CHECKING:
    from .auth import Caller

access_log = logging.getLogger("bbkb.access")
#: The ASGI scope's entry where the API's auth dependency leaves the caller (service.auth.
#: Caller): the access log names the owner and the key (its first characters) of a request.
CALLER = "bbkb.caller"
#: Routes whose successful answers are logged at DEBUG only.
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
batch_log = logging.getLogger("bbkb.server")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram("bbkb_request_seconds", "HTTP request latency",
                                  ["method", "route", "status"], buckets=LATENCY_BUCKETS,
                                  registry=self.registry)
        self.suggestions = Counter("bbkb_suggestions_total", "Trials handed to workers",
                                   registry=self.registry)
        self.results = Counter("bbkb_results_total", "Trial outcomes recorded", ["outcome"],
                               registry=self.registry)
        self.batches = Counter("bbkb_batches_total", "Batches opened (resparsifications)",
                               registry=self.registry)
        self.resparsify = Histogram("bbkb_resparsify_seconds",
                                    "Time to resample a batch's dictionary",
                                    buckets=LATENCY_BUCKETS, registry=self.registry)
        self.refit = Histogram("bbkb_refit_seconds", "Time to refit the kernel "
                               "hyper-parameters at a batch opening",
                               buckets=LATENCY_BUCKETS, registry=self.registry)
        self.batch_open = Histogram("bbkb_batch_open_seconds", "Time to open a batch "
                                    "(dictionary, kernel refit, posterior)",
                                    buckets=LATENCY_BUCKETS, registry=self.registry)

    def batches_opened(self, study_id: int, opened: list[BatchInfo]) -> None:
        """Count and time the batches a change opened (Runtimes' ``on_opened``), and log them."""
        for info in opened:
            self.batches.inc()
            self.batch_open.observe(info.open_seconds)
            if math.isfinite(info.resparsify_seconds):  # NaN: no dictionary
                self.resparsify.observe(info.resparsify_seconds)
            if math.isfinite(info.refit_seconds):  # NaN: no refit at this batch
                self.refit.observe(info.refit_seconds)
            batch_log.info("batch opened", extra={"study_id": study_id, "batch": info.index,
                                                  "seconds": round(info.open_seconds, 4)})

    def render(self) -> bytes:
        return generate_latest(self.registry)


class LatencyMiddleware:
    """Times every HTTP request under its route template (not the raw path: bounded labels),
    and logs it as a structured ``bbkb.access`` event."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def record(message: dict) -> None:  # type: ignore[type-arg]
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record)
        finally:
            seconds = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status[0])).observe(seconds)
            # a successful probe (load balancers poll them every few seconds) only at DEBUG
            level = logging.DEBUG if route in PROBES and status[0] < 400 else logging.INFO
            if access_log.isEnabledFor(level):
                access_log.log(level, "%s %s %d", scope["method"], scope["path"], status[0], extra={
                    "method": scope["method"], "route": route, "status": status[0],
                    "ms": round(1000 * seconds, 2), **_ids(scope.get("path_params", {})),
                    **_who(scope.get(CALLER))})


def _who(caller: Caller | None) -> dict[str, object]:
    """Whose request it was: the owner's id, and the key's first characters and scope (keys
    list shows them; never the key)."""
    if caller is None:
        return {}
    return {"owner_id": caller.owner,
            **({"key": caller.key, "scope": caller.scope} if caller.key else {})}


def _ids(params: dict[str, object]) -> dict[str, object]:
    """The path's ids (study_id, trial_id), as numbers where they are. Only ``*_id``: another
    parameter may be named like a LogRecord attribute (the dashboard asset's ``name``), which
    ``extra`` may not overwrite (KeyError: a traceback per asset request)."""
    return {k: _number(v) for k, v in params.items() if k.endswith("_id")}


def _number(value: object) -> object:
    try:
        return int(value) if isinstance(value, str) and value.isascii() else value
    except ValueError:
        return value
