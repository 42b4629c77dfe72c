"""Checks made on a request before the app reads its body (ASGI middleware).

* With API keys, a write under ``/v1`` without an ``Authorization`` header is a 401 at once:
  FastAPI parses a declared JSON body before any dependency runs, so a body of hundreds of
  megabytes with no key at all held the event loop for seconds and took gigabytes before its
  401 (``POST /v1/studies`` also reads its body after auth; the key itself is checked by the
  routes, :func:`service.auth.authenticate`).
* Without API keys (``BBKB_AUTH=none``), a write whose ``Origin`` is not the server's own is a
  403: a web page the user visits could otherwise post results or pause studies through the
  browser (a CSV body or no body at all is a "simple" cross-origin request, sent without a
  preflight). Tools (the SDK, curl, workers) send no Origin; the dashboard only reads.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ..auth import MISSING_KEY
from .errors import error_response

WRITES = ("POST", "PUT", "PATCH", "DELETE")


class RequestGuard:
    def __init__(self, app, keys: bool) -> None:  # type: ignore[no-untyped-def]
        self.app, self.keys = app, keys

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["method"] in WRITES:
            headers = dict(scope.get("headers", ()))
            refusal = None
            if self.keys:
                if scope["path"].startswith("/v1/") and not headers.get(b"authorization",
                                                                         b"").strip():
                    refusal = error_response(401, MISSING_KEY, "authorization")
            elif b"origin" in headers and not _same_origin(headers):
                refusal = error_response(
                    403, "a write from another origin (a web page) is refused: this server has "
                    "no API keys (BBKB_AUTH=none)", "origin")
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _same_origin(headers: dict[bytes, bytes]) -> bool:
    """Whether ``Origin``'s host and port are the request's (``X-Forwarded-Host`` behind a
    proxy, else ``Host``)."""
    origin = headers[b"origin"].decode("latin-1").strip()
    host = (headers.get(b"x-forwarded-host") or headers.get(b"host") or b"").decode("latin-1")
    host = host.split(",")[0].strip().lower()
    return origin != "null" and urlsplit(origin).netloc.lower() == host != ""

