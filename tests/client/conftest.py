"""Fixtures of the SDK tests: the real app in-process (TestClient is an httpx2.Client)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import numpy as np
import pytest
from fastapi import FastAPI

from client import Client, Study
from service.api.app import create_app
from service.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


ENGINE = {"strategy": "bbkb", "mode": "async", "seed": 3, "lam": 0.5,
          "kernel": {"name": "rbf", "lengthscale": 0.2}}


@pytest.fixture
def make_app() -> Callable[..., FastAPI]:
    def make(tmp_path: Path, **settings) -> FastAPI:  # type: ignore[no-untyped-def]
        return create_app(Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}",
                                   data_dir=tmp_path, **({"auth": "none"} | settings)))
    return make


@pytest.fixture
def app_http(tmp_path: Path, make_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with TestClient(make_app(tmp_path)) as http:
        yield http


@pytest.fixture
def bbkb(app_http: TestClient) -> Iterator[Client]:
    with Client(http=app_http, backoff=0.001) as sdk:
        yield sdk


@pytest.fixture
def study(bbkb: Client) -> Study:
    """An async BBKB study over 120 random points of the unit square (x0, x1)."""
    X = np.random.default_rng(0).random((120, 2))
    return bbkb.create_study("s", candidates=X, engine=ENGINE)


class BrokenOff(httpx2.SyncByteStream):
    """A body that stops halfway with a ReadError (the connection lost mid-download)."""

    def __init__(self, content: bytes, request: httpx2.Request) -> None:
        self.content, self.request = content, request

    def __iter__(self) -> Iterator[bytes]:
        yield self.content[: len(self.content) // 2]
        raise httpx2.ReadError("connection reset by peer", request=self.request)


class Relay(httpx2.BaseTransport):
    """Forwards to the in-process app, recording calls; ``plan`` injects transport failures:
    "connect" (refused, never sent), "lost" (applied, answer lost), "cut" (the answer's body
    breaks off halfway), "503", or "ok"."""

    def __init__(self, target: TestClient, plan: list[str] | None = None) -> None:
        self.target, self.plan = target, list(plan or [])
        self.calls: list[tuple[str, str, str, int]] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        action = self.plan.pop(0) if self.plan else "ok"
        body = request.read()
        self.calls.append((request.method, request.url.path, action, len(body)))
        if action == "connect":
            raise httpx2.ConnectError("connection refused", request=request)
        if action == "503":
            return httpx2.Response(503, json={"detail": "restarting", "field": None})
        answer = self.target.send(self.target.build_request(
            request.method, str(request.url), headers=request.headers, content=body))
        if action == "lost":
            raise httpx2.ReadError("connection reset by peer", request=request)
        headers = {k: v for k, v in answer.headers.items()
                   if k.lower() not in ("content-length", "content-encoding")}
        if action == "cut":
            return httpx2.Response(answer.status_code, headers=headers,
                                   stream=BrokenOff(answer.content, request))
        return httpx2.Response(answer.status_code, headers=headers, content=answer.content)


@pytest.fixture
def relayed(app_http: TestClient) -> Iterator[Callable[..., tuple[Client, Relay]]]:
    opened: list[httpx2.Client] = []

    def make(plan: list[str] | None = None, **options) -> tuple[Client, Relay]:  # type: ignore[no-untyped-def]
        relay = Relay(app_http, plan)
        http = httpx2.Client(transport=relay, base_url="http://testserver")
        opened.append(http)
        return Client(http=http, **({"backoff": 0.001} | options)), relay

    yield make
    for http in opened:
        http.close()
