"""Every exception the SDK raises, in one place.

::

    BBKBError                   base of everything below
    ├── APIError                the server answered with an error (status_code, detail, field)
    │   ├── AuthenticationError 401: missing, unknown or revoked API key
    │   ├── PermissionDeniedError 403: a worker key where an owner key is needed
    │   ├── NotFoundError       404: no such study or trial (or not yours)
    │   ├── ConflictError       409: the state forbids it (trial already completed with
    │   │                       another value, study paused, name taken, ...)
    │   └── ValidationError     400 / 413 / 422: the request was invalid (``field`` names it)
    │       └── InvalidArgument the same checks, failed before sending (also a ``ValueError``)
    └── ServerUnavailable       no answer after all retries (connection failures, 502/503/504)

Arguments the API would refuse (an empty name, a NaN value, NaN or infinity anywhere in
``engine`` or in inline candidates, a 1-D matrix) raise :class:`InvalidArgument` before any
request is sent: catch ``ValidationError`` for both cases, or ``ValueError`` as before. Arguments
of the wrong Python type (``Client(123)``, ``engine="bbkb"``) raise ``TypeError``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx2
import pydantic

from service.api.schemas import error_field

__all__ = ["APIError", "AuthenticationError", "BBKBError", "ConflictError", "InvalidArgument",
           "NotFoundError", "PermissionDeniedError", "ServerUnavailable", "ValidationError",
           "error_from_response", "validated"]

M = TypeVar("M", bound=pydantic.BaseModel)


class BBKBError(Exception):
    """Base class of every error raised by the SDK."""


class APIError(BBKBError):
    """The server answered with an error status; ``detail`` and ``field`` come from its body,
    ``hint`` (None, or advice the SDK adds, e.g. on a url ending in /v1) is in ``str()``."""

    def __init__(self, status_code: int, detail: str, field: str | None = None, *,
                 hint: str | None = None) -> None:
        self.status_code = status_code
        self.detail = detail
        self.field = field
        self.hint = hint
        where = f" (field: {field})" if field else ""
        super().__init__(f"{status_code}: {detail}{where}" + (f"; {hint}" if hint else ""))


class AuthenticationError(APIError):
    """401: the request carried no valid ``Authorization: Bearer <api key>``."""


class PermissionDeniedError(APIError):
    """403: the key may not do this: a worker key (``bbkb keys create --scope worker``) creates,
    pauses, deletes and dispatches nothing (or a write from a web page's origin without keys)."""


class NotFoundError(APIError):
    """404: the study or trial does not exist, was deleted, or belongs to another owner."""


class ConflictError(APIError):
    """409: the request contradicts the current state of the study or trial."""


class ValidationError(APIError):
    """400, 413 or 422: the request was rejected as invalid; ``field`` says where."""


class InvalidArgument(ValidationError, ValueError):
    """Refused before sending, by the checks the server would make (``status_code`` is 422, the
    answer it would give). ``str()`` is ``"<field>: <detail>"``."""

    def __init__(self, detail: str, field: str | None = None) -> None:
        super().__init__(422, detail, field)
        self.args = (f"{field}: {detail}" if field else detail,)


def validated(model: type[M], **fields: Any) -> M:
    """``model(**fields)``; a pydantic error becomes :class:`InvalidArgument` (its first error)."""
    try:
        return model(**fields)
    except pydantic.ValidationError as error:
        raise invalid_argument(error) from error


def invalid_argument(error: pydantic.ValidationError) -> InvalidArgument:
    """The first error of a pydantic ``ValidationError``: its location, message and input."""
    first = error.errors()[0]
    message = first["msg"].removeprefix("Value error, ")
    given = first.get("input")
    if not isinstance(given, dict | list | pydantic.BaseModel):
        message += f"; got {given!r:.80}"
    return InvalidArgument(message, error_field(first))


class ServerUnavailable(BBKBError):
    """The server could not be reached (or kept answering 502/503/504) after all retries."""

    def __init__(self, message: str, *, attempts: int, status_code: int | None = None) -> None:
        self.attempts = attempts
        self.status_code = status_code
        super().__init__(message)


_BY_STATUS: dict[int, type[APIError]] = {
    400: ValidationError, 401: AuthenticationError,
    403: PermissionDeniedError, 404: NotFoundError, 409: ConflictError,
    413: ValidationError, 422: ValidationError}


def error_from_response(response: httpx2.Response) -> APIError:
    """The :class:`APIError` subclass for an error response (its JSON ``detail`` and ``field``)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        detail, field = str(body["detail"]), body.get("field")
    else:
        detail, field = response.text[:500] or response.reason_phrase, None
    cls = _BY_STATUS.get(response.status_code, APIError)
    return cls(response.status_code, detail, None if field is None else str(field))
