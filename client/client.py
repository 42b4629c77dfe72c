"""The HTTP client: configuration, retries, error mapping, and the study collection.

The request and response models are ``service.api.schemas`` (one definition for server and SDK;
it imports only pydantic, so the SDK needs neither numpy nor the server's dependencies).
"""

from __future__ import annotations

import io
import math
import numbers
import os
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import httpx2

from service.api.schemas import (
    Account,
    QueueState,
    StudyCreate,
    StudyList,
    StudyPublic,
    name_forms,
)

from .errors import (
    APIError,
    BBKBError,
    InvalidArgument,
    NotFoundError,
    ServerUnavailable,
    error_from_response,
    validated,
)
from .study import Study

__all__ = ["DEFAULT_URL", "INLINE_LIMIT", "Client"]

DEFAULT_URL = "http://127.0.0.1:8000"
#: Candidate matrices with more numbers than this are uploaded as .npy instead of inline JSON.
INLINE_LIMIT = 100_000
RETRY_STATUSES = frozenset({502, 503, 504})
MAX_DELAY = 10.0
#: Errors raised before the request reached the server: a retry is safe for any request.
_NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


def _environment_key() -> str | None:
    """``BBKB_API_KEY``, else the key in the file ``BBKB_API_KEY_FILE`` (compose's worker key:
    a mounted secret, e.g. written by ``bbkb keys ensure``), else None. An empty value is unset."""
    key, key_file = os.environ.get("BBKB_API_KEY"), os.environ.get("BBKB_API_KEY_FILE")
    if key or not key_file:
        return key or None
    try:
        return Path(key_file).read_text().strip() or None
    except OSError as error:
        raise ValueError(f"BBKB_API_KEY_FILE={key_file!r} cannot be read: {error}") from error


class Client:
    """A connection to a bbkb-service server.

    ``url`` and ``api_key`` default to the environment variables ``BBKB_URL`` and
    ``BBKB_API_KEY`` or ``BBKB_API_KEY_FILE`` (then to ``http://127.0.0.1:8000`` and no key).
    Failed connections and 502/503/504 answers are retried ``retries`` times with exponential
    backoff starting at ``backoff`` seconds, so a worker rides out a server restart; 4xx answers
    never are. ``timeout`` (seconds per request) stays above the server's wait for a busy
    database (``BBKB_DATABASE_BUSY_SECONDS``, 30), which it answers with a retryable 503: a
    shorter one gave up on requests the server then carried out.
    Requests that are not idempotent on the server (creating a study, importing observations,
    failing a trial without a ``worker_id``) are retried only when they surely did not reach it.

    ``http`` injects the underlying ``httpx2.Client`` (e.g. a ``fastapi.testclient.TestClient``);
    its ``base_url`` is used when ``url`` is None, and it is left open by :meth:`close`.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 timeout: float = 60.0, retries: int = 5, backoff: float = 0.2,
                 http: httpx2.Client | None = None) -> None:
        for name, given in (("url", url), ("api_key", api_key)):
            if given is not None and not isinstance(given, str):
                raise TypeError(f"{name} must be a str or None, not {type(given).__name__}")
        if retries < 0 or backoff < 0:
            raise ValueError("retries and backoff must be >= 0")
        # another library's client (httpx's) raises errors the retries do not know
        if http is not None and not isinstance(http, httpx2.Client):
            raise TypeError(f"http must be an httpx2.Client (a Starlette TestClient is one), "
                            f"not {type(http).__module__}.{type(http).__name__}")
        given_base = str(http.base_url) if http is not None and str(http.base_url) else None
        self.url = (url or given_base or os.environ.get("BBKB_URL") or DEFAULT_URL).rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {self.url!r}")
        self.api_key = api_key if api_key is not None else _environment_key()
        if self.api_key and not (self.api_key.isascii() and self.api_key.isprintable()):
            raise ValueError("the API key must be printable ASCII (an HTTP header value)")
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self._owns_http = http is None
        self._http = http if http is not None else httpx2.Client(timeout=timeout)
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the connection pool (an injected ``http`` client stays open). Idempotent."""
        if not self._closed and self._owns_http:
            self._http.close()
        self._closed = True

    def __enter__(self) -> Client:
        if self._closed:
            raise RuntimeError("cannot reopen a closed Client; create a new one")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Client {self.url} ({state})>"

    # -- requests ----------------------------------------------------------------------------

    def request(self, method: str, path: str, *, json: Any = None, content: bytes | None = None,
                params: Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None,
                idempotent: bool = True, stream: bool = False) -> httpx2.Response:
        """Send ``method path`` with retries; an error status raises an :class:`APIError`.

        With ``stream=True`` the body is not read: close the response when done.
        """
        if self._closed:
            raise RuntimeError("this Client is closed")
        all_headers = {"User-Agent": "bbkb-client", **(headers or {})}
        if self.api_key:
            all_headers["Authorization"] = f"Bearer {self.api_key}"
        response = self._send(method, path, idempotent=idempotent, stream=stream, json=json,
                              content=content, params=params, headers=all_headers)
        if response.status_code >= 400:
            response.read()
            response.close()
            error = error_from_response(response)
            hint = self._hint(error, method, path)
            raise error if hint is None else type(error)(
                error.status_code, error.detail, error.field, hint=hint)
        return response

    def _hint(self, error: APIError, method: str, path: str) -> str | None:
        """Advice on an error the client's own configuration likely caused: no such route (a
        url ending in /v1: every path starts with it), or no API key for a server with keys."""
        if error.status_code == 404 and error.field is None:  # the framework's: no route
            where = f"no API route {method} {self.url}{path}"
            base = self.url.removesuffix("/v1")
            if base != self.url:
                return (f"{where}: the url (or BBKB_URL) is the server's address without "
                        f"/v1, e.g. Client({base!r})")
            return f"{where}: is {self.url} a bbkb server's address (e.g. {DEFAULT_URL})?"
        if error.status_code == 401 and not self.api_key:
            return ("this server needs an API key: Client(api_key=...), or set BBKB_API_KEY "
                    "(or BBKB_API_KEY_FILE)")
        return None

    def _send(self, method: str, path: str, *, idempotent: bool, stream: bool,
              **kwargs: Any) -> httpx2.Response:
        url = self.url + path
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            request = self._http.build_request(method, url, timeout=self.timeout, **kwargs)
            try:
                response = self._http.send(request, stream=stream)
            except httpx2.TransportError as exc:
                if last or not (idempotent or isinstance(exc, _NOT_SENT)):
                    raise self._unavailable(method, path, attempt, exc) from exc
                delay = self._delay(attempt)
            else:
                code = response.status_code
                if code not in RETRY_STATUSES:
                    return response
                response.close()
                if last or not (idempotent or code == 503):
                    raise self._unavailable(method, path, attempt, None, code)
                delay = self._delay(attempt, response.headers.get("Retry-After"))
            time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after: str | None = None) -> float:
        """The wait before retry ``attempt + 1``: the exponential backoff, at least the server's
        ``Retry-After``. Its "retry after 1 s" is a floor, not the wait: a worker's retry budget
        (workers.job.retry_policy) counts on the backoff, and 16 one-second waits made a
        database outage of 17 s lose the results of the evaluations then in flight."""
        backoff = float(min(self.backoff * 2**attempt, MAX_DELAY) * random.uniform(0.5, 1.0))
        if retry_after is not None and retry_after.replace(".", "", 1).isdigit():
            return max(min(float(retry_after), MAX_DELAY), backoff)
        return backoff

    def _unavailable(self, method: str, path: str, attempt: int, exc: Exception | None,
                     status: int | None = None) -> ServerUnavailable:
        cause = f"HTTP {status}" if status is not None else f"{type(exc).__name__}: {exc}"
        maybe = "" if attempt == self.retries else \
            " (not retried: the request may have reached the server)"
        return ServerUnavailable(f"{method} {self.url}{path} failed after {attempt + 1} "
                                 f"attempt(s): {cause}{maybe}", attempts=attempt + 1,
                                 status_code=status)

    def queue(self) -> QueueState:
        """The Redis queue the server dispatches to: ``redis`` ("ok", "unreachable", "not
        configured"), jobs queued / started / failed, and the live workers."""
        return QueueState.model_validate(self.request("GET", "/v1/queue").json())

    def account(self) -> Account:
        """Who the key is (``owner``, ``scope``: a worker key cannot create, pause, delete or
        dispatch) and the owner's quotas: ``studies`` of ``max_studies``, running dispatches'
        ``parallelism`` of ``max_parallelism`` (None: no limit)."""
        return Account.model_validate(self.request("GET", "/v1/me").json())

    # -- studies -----------------------------------------------------------------------------

    def studies(self, *, page_size: int = 100) -> list[StudyPublic]:
        """Every study of the caller in id order (deleted ones excluded), fetched page by page."""
        found: list[StudyPublic] = []
        after: int | None = 0
        while after is not None:
            page = self._study_page(after=after, limit=page_size)
            found += page.studies
            after = page.next_after
        return found

    def _study_page(self, **params: Any) -> StudyList:
        return StudyList.model_validate(self.request("GET", "/v1/studies", params=params).json())

    def study(self, study: int | str, *, fetch: bool = True) -> Study:
        """A handle on an existing study, by id or by name (NotFoundError if none).

        ``fetch=False`` skips the request for an id (a worker that only asks and tells).
        """
        if isinstance(study, str):
            forms = name_forms(study)  # as typed, and as the server stores names
            match = [s for s in self._study_page(name=study, limit=1).studies
                     if s.name in forms]  # a server without the name filter lists them all
            if not match:
                raise NotFoundError(404, f"no study named {study!r}", "name")
            return Study(self, match[0].id, match[0])
        if isinstance(study, bool) or not isinstance(study, numbers.Integral):
            raise TypeError(f"study must be an int id or a str name, not "
                            f"{type(study).__name__} {study!r:.50}")
        study = int(study)
        return Study(self, study, self._get_study(study) if fetch else None)

    def _get_study(self, study_id: int) -> StudyPublic:
        return StudyPublic.model_validate(self.request("GET", f"/v1/studies/{study_id}").json())

    def create_study(self, name: str, *, candidates: Any = None,
                     search_space: Sequence[Any] | None = None, n_candidates: int | None = None,
                     direction: Literal["maximize", "minimize"] = "maximize",
                     engine: Mapping[str, Any] | None = None,
                     parameter_names: Sequence[str] | None = None, objective: str | None = None,
                     max_attempts: int = 3, lease_seconds: float = 300.0) -> Study:
        """Create a study over a candidate matrix (rows of numbers: lists, numpy, pandas) or a
        search space (parameter dicts + ``n_candidates``).

        Matrices of more than ``INLINE_LIMIT`` numbers are uploaded as a .npy file (needs numpy).
        ``engine`` is the optimiser configuration (strategy, mode, kernel, lam, batch_size, seed..).
        Invalid arguments (NaN or infinity in ``engine`` or inline candidates, a matrix that is
        not 2-D, what the server would refuse) raise :class:`~client.errors.InvalidArgument`
        before any request.
        """
        if engine is not None and not isinstance(engine, Mapping):
            raise TypeError(f"engine must be a mapping such as {{'strategy': 'bbkb'}}, not "
                            f"{type(engine).__name__} {engine!r:.50}")
        if isinstance(search_space, Mapping | str | bytes):  # list() would take its keys
            raise InvalidArgument("must be a list of parameters ([{'name': ..., 'low': ..., "
                                  f"'high': ...}}, ...]), not a {type(search_space).__name__}",
                                  "search_space")
        engine = _plain(dict(engine or {}))
        _check_finite(engine, "engine")
        names = list(parameter_names) if parameter_names is not None else _columns(candidates)
        upload = candidates is not None and _size(candidates) > INLINE_LIMIT
        inline = None if upload or candidates is None else _inline(candidates)
        _check_finite(inline, "candidates")
        data = _npy_bytes(candidates) if upload else b""
        body = validated(
            StudyCreate, name=name, direction=direction, engine=engine, parameter_names=names,
            candidates=inline, search_space=None if search_space is None else list(search_space),
            n_candidates=n_candidates, upload=upload, objective=objective,
            max_attempts=max_attempts, lease_seconds=lease_seconds)
        response = self.request("POST", "/v1/studies", idempotent=False,
                                json=body.model_dump(mode="json", exclude_none=True))
        info = StudyPublic.model_validate(response.json())
        if upload:
            info = self._upload_candidates(info.id, data)
        return Study(self, info.id, info)

    def _upload_candidates(self, study_id: int, data: bytes) -> StudyPublic:
        """PUT the .npy matrix; on failure the half-created study is deleted again."""
        try:
            response = self.request("PUT", f"/v1/studies/{study_id}/candidates", content=data,
                                    headers={"Content-Type": "application/octet-stream"})
        except BBKBError:
            info = self._get_study(study_id)  # a retried PUT whose first try was applied: 409
            if info.status != "awaiting_candidates":
                return info
            self.request("DELETE", f"/v1/studies/{study_id}")
            raise
        return StudyPublic.model_validate(response.json())


def _size(candidates: Any) -> int:
    """Number of values of a 2-D matrix (InvalidArgument for another shape)."""
    shape = getattr(candidates, "shape", None)
    if shape is not None:
        if len(shape) != 2:
            raise InvalidArgument(f"must be a 2-D matrix (rows x parameters); got shape "
                                  f"{tuple(shape)}", "candidates")
        return int(shape[0]) * int(shape[1])
    if not isinstance(candidates, Sequence) or isinstance(candidates, str | bytes):
        raise TypeError(f"candidates must be a matrix (rows of numbers: lists, numpy, pandas), "
                        f"not {type(candidates).__name__}")
    try:
        return sum(len(row) for row in candidates)
    except TypeError:
        raise InvalidArgument("must be a 2-D matrix: a sequence of rows of numbers",
                              "candidates") from None


def _plain(value: Any) -> Any:
    """Nested dicts and lists with numpy scalars and arrays turned into Python numbers and
    lists (``tolist()``), which JSON encodes (``{"seed": np.int64(3)}`` failed to serialise)."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if not isinstance(value, str | bytes) and callable(getattr(value, "tolist", None)):
        return _plain(value.tolist())
    return value


def _check_finite(value: Any, field: str) -> None:
    """InvalidArgument naming the first NaN or infinity in nested dicts and lists (JSON has
    neither, and would otherwise send null or fail to encode). Integers pass, however large:
    JSON holds them, and the server judges their range."""
    if isinstance(value, Mapping):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) \
                and not math.isfinite(value):
            raise InvalidArgument(f"must be a finite number; got {value}", field)
        return
    for key, item in items:
        if isinstance(item, float) and math.isfinite(item):
            continue  # the common case, fast
        _check_finite(item, f"{field}.{key}")


def _columns(candidates: Any) -> list[str] | None:
    """Column names of a pandas DataFrame, else None (the server names columns x0, x1, ...)."""
    columns = getattr(candidates, "columns", None)
    return None if columns is None else [str(c) for c in columns]


def _inline(candidates: Any) -> list[list[float]]:
    """The matrix as lists of floats (InvalidArgument unless numbers)."""
    if hasattr(candidates, "to_numpy"):
        candidates = candidates.to_numpy()
    if hasattr(candidates, "tolist"):  # numpy (then importable): converted in C
        return list(_float64(candidates).tolist())
    try:
        return [[float(x) for x in row] for row in candidates]
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"must be numbers: {error}", "candidates") from error


def _float64(candidates: Any) -> Any:
    """The matrix as a float64 numpy array (InvalidArgument unless real numbers)."""
    import numpy as np

    try:
        if np.iscomplexobj(candidates):  # the conversion would drop the imaginary part
            raise TypeError(f"complex {np.asarray(candidates).dtype} values")
        return np.asarray(candidates, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"must be numbers: {error}", "candidates") from error


def _npy_bytes(candidates: Any) -> bytes:
    """The matrix as .npy bytes of float64 (InvalidArgument unless numbers). Finiteness is left
    to the server, which refuses the upload (the half-created study is then deleted)."""
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, _float64(candidates), allow_pickle=False)
    return buffer.getvalue()
