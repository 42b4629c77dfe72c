"""Body size limits on a real server (uvicorn): every 413 is the API's JSON ``{detail, field}``,
with a Content-Length or without one (chunked transfer encoding). A chunked JSON body used to
pass ``BBKB_MAX_JSON_BYTES`` unchecked (201 for 8 KB over a 2000-byte limit), and a body over
``BBKB_MAX_UPLOAD_BYTES`` got Starlette's text/plain "Content Too Large"."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import httpx2
import numpy as np
import pytest

JSON_LIMIT, UPLOAD_LIMIT = 2000, 3000


def _chunked(data: bytes, size: int = 500) -> Iterator[bytes]:
    """An iterator body: httpx sends it chunked, with no Content-Length."""
    for i in range(0, len(data), size):
        yield data[i:i + size]


def _npy(rows: int) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.random.default_rng(0).random((rows, 5)))
    return buffer.getvalue()


@pytest.fixture
def http(server_factory, tmp_path) -> Iterator[httpx2.Client]:  # type: ignore[no-untyped-def]
    server = server_factory({"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'limits.db'}",
                             "BBKB_AUTH": "none", "BBKB_MAX_JSON_BYTES": str(JSON_LIMIT),
                             "BBKB_MAX_UPLOAD_BYTES": str(UPLOAD_LIMIT)})
    with httpx2.Client(base_url=server.url, timeout=30) as client:
        yield client


def _too_large(response: httpx2.Response, limit: int) -> None:
    assert response.status_code == 413, response.text
    assert response.headers["content-type"] == "application/json", response.headers
    assert response.json() == {"detail": f"body larger than {limit} bytes", "field": "body"}


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_json_body_over_the_limit_is_a_json_413(http, chunked):
    big = json.dumps({"name": "big", "candidates": [[0.123456789] * 10] * 80}).encode()
    assert len(big) > 4 * JSON_LIMIT
    headers = {"content-type": "application/json"}
    _too_large(http.post("/v1/studies", content=_chunked(big) if chunked else big,
                         headers=headers), JSON_LIMIT)
    assert http.get("/v1/studies").json()["studies"] == []
    small = json.dumps({"name": "small", "candidates": [[0.5, 0.25]] * 10}).encode()
    created = http.post("/v1/studies", content=_chunked(small, 50) if chunked else small,
                        headers=headers)
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    suggest = json.dumps({"worker_id": "w" * 3000}).encode()  # any JSON route
    _too_large(http.post(f"/v1/studies/{sid}/suggestions",
                         content=_chunked(suggest) if chunked else suggest,
                         headers=headers), JSON_LIMIT)
    assert http.get(f"/v1/studies/{sid}").json()["n_trials"] == 0


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_upload_over_its_limit_is_a_json_413(http, chunked):
    sid = http.post("/v1/studies", json={"name": "up", "upload": True}).json()["id"]
    url = f"/v1/studies/{sid}/candidates"
    big = _npy(100)  # 4128 bytes: over the upload limit
    headers = {"content-type": "application/octet-stream"}
    _too_large(http.put(url, content=_chunked(big) if chunked else big, headers=headers),
               UPLOAD_LIMIT)
    assert http.get(f"/v1/studies/{sid}").json()["status"] == "awaiting_candidates"
    fits = _npy(50)  # 2128 bytes: over the JSON limit, which is not the upload's
    assert JSON_LIMIT < len(fits) <= UPLOAD_LIMIT
    done = http.put(url, content=_chunked(fits) if chunked else fits, headers=headers)
    assert done.status_code == 200 and done.json()["n_candidates"] == 50, done.text


def test_a_get_with_a_chunked_body_over_the_limit_still_streams(http):
    """A streamed answer (the export) listens for the client's disconnect by reading the
    request, which the size limit counted: an 8 KB chunked body on a GET cut the export off
    mid-stream (RemoteProtocolError) with four tracebacks logged."""
    created = http.post("/v1/studies", json={"name": "s", "candidates": [[0.1], [0.2], [0.3]]})
    sid = created.json()["id"]
    export = http.request("GET", f"/v1/studies/{sid}/export", content=_chunked(b"x" * 8000))
    assert export.status_code == 200 and export.text.startswith("trial_id")
    study = http.request("GET", f"/v1/studies/{sid}", content=_chunked(b"x" * 8000))
    assert study.status_code == 200 and study.json()["id"] == sid
