"""Prometheus scrape endpoint; with ``BBKB_METRICS_TOKEN`` set, only for a scraper that sends it
(``Authorization: Bearer <token>``, Prometheus' ``authorization`` / ``bearer_token_file``)."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from ...auth import bearer_token
from ...errors import Unauthorized

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response)
def get_metrics(request: Request) -> Response:
    token = request.app.state.settings.metrics_token
    if token is not None:
        try:
            given = bearer_token(request.headers.get("authorization"))
        except Unauthorized:
            given = ""
        if not secrets.compare_digest(given.encode(), token.get_secret_value().encode()):
            raise Unauthorized("/metrics needs 'Authorization: Bearer <BBKB_METRICS_TOKEN>'",
                               field="authorization")
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
