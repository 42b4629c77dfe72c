"""Every error leaves as JSON ``{"detail": ..., "field": ...}`` with a 4xx status (503 with
Retry-After when the database is busy or unreachable); bad input is never a 500 (a 500 is a
bug, logged with its traceback)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ..engine import EngineError
from ..errors import ServiceError
from ..store.database import database_unavailable
from .schemas import ErrorBody, error_field

log = logging.getLogger("bbkb.api")

#: The error answers of every /v1 route, documented in the OpenAPI schema with their body
#: (FastAPI's default 422 schema is not what :func:`install` sends).
RESPONSES: dict[int | str, dict] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
        (401, "no valid API key (BBKB_AUTH=keys); with the header WWW-Authenticate: Bearer"),
        (403, "a worker key (bbkb keys create --scope worker) on a route that needs an owner "
              "key (create, upload, pause, resume, delete, dispatch, import); or a write sent "
              "from a web page of another origin (its Origin header) to a server without API "
              "keys (BBKB_AUTH=none)"),
        (404, "no such study or trial (or another owner's)"),
        (409, "the request conflicts with the state: a different value for a completed trial, "
              "a paused study, candidates not uploaded yet, ..."),
        (413, "the body is larger than the server accepts"),
        (422, "invalid input, malformed JSON or CSV included: `field` names it"),
        (503, "the database is busy or unreachable: retry after Retry-After seconds"))}


def error_response(status: int, detail: str, field: str | None,
                   headers: dict | None = None) -> JSONResponse:
    """The one shape of every error answer (also the middlewares', before a route runs); a 401
    names its scheme (RFC 9110 11.6.1)."""
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse({"detail": detail, "field": field}, status_code=status, headers=headers)


def malformed_json(exc: BaseException) -> str:
    """Why a body is not JSON that can be read, as every route says it (FastAPI's own parsing
    and the routes that read their body themselves)."""
    if isinstance(exc, RecursionError):
        return "malformed JSON: nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return f"malformed JSON: not UTF-8 ({exc.reason} at byte {exc.start})"
    return f"malformed JSON: {exc}"  # e.g. an integer of over 4300 digits


def install(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc.status_code, str(exc), exc.field)

    @app.exception_handler(EngineError)
    async def _engine(_: Request, exc: EngineError) -> JSONResponse:
        return error_response(422, str(exc), exc.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        kind, where = first.get("type"), tuple(first.get("loc", ()))
        if kind == "json_invalid":  # loc: ("body", character offset)
            offset = where[1] if len(where) > 1 else "?"
            reason = first.get("ctx", {}).get("error", "")
            return error_response(422, f"malformed JSON at character {offset}: {reason}", "body")
        if where == ("body",) and kind in ("model_attributes_type", "dict_type", "missing"):
            return error_response(422, "the body must be a JSON object, sent with Content-Type: "
                                  "application/json", "body")
        message = str(first.get("msg")).removeprefix("Value error, ")  # our validators' own
        return error_response(422, message, error_field(first, ("body", "query", "path")))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI's "error parsing
            return error_response(422, malformed_json(exc.__cause__), "body")  # the body"
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Starlette names the methods of the first route only
            headers = {**(headers or {}), "Allow": ", ".join(_allowed(request))}
        return error_response(exc.status_code, str(exc.detail), None, headers)

    @app.exception_handler(OperationalError)
    async def _database(request: Request, exc: OperationalError) -> JSONResponse:
        """A busy or unreachable database: the transaction was rolled back, a retry is safe."""
        if database_unavailable(exc):
            log.warning("database unavailable on %s %s: %s", request.method, request.url.path,
                        exc.orig)
            return error_response(503, "the database is busy or unreachable: retry", None,
                                  {"Retry-After": "1"})
        return await _unexpected(request, exc)

    @app.exception_handler(PoolTimeout)
    async def _pool(request: Request, exc: PoolTimeout) -> JSONResponse:
        """Every pooled connection stayed busy for ``BBKB_DATABASE_BUSY_SECONDS``: nothing was
        done, a retry is safe."""
        log.warning("no database connection free on %s %s: %s", request.method,
                    request.url.path, exc)
        return error_response(503, "the database is busy (no connection free): retry", None,
                              {"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        # the exception goes on to the server, which then closes the connection: said here,
        # a keep-alive client opens a new one (it met a reset, and the SDK reported a request
        # it cannot resend as "may have reached the server")
        return error_response(500, "internal error (logged on the server)", None,
                              {"Connection": "close"})


def _allowed(request: Request) -> list[str]:
    """The methods some route at the request's path serves."""
    return [method for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                   for route in request.app.router.routes)]
