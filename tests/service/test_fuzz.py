"""Fuzzing the OpenAPI schema with schemathesis: whatever the input, never a 5xx."""

from __future__ import annotations

import warnings

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from service.api.app import create_app
from service.settings import Settings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fuzz")
    app = create_app(Settings(database_url=f"sqlite:///{tmp / 'fuzz.db'}", auth="none",
                              data_dir=tmp))
    with TestClient(app) as client:  # runs the lifespan; seeds one study to hit real paths
        client.post("/v1/studies", json={"name": "seed", "candidates": [[0.0, 1.0], [1.0, 0.0]],
                                          "engine": {"mode": "async"}})
        client.post("/v1/studies/1/suggestions", json={"worker_id": "w", "count": 2})
        yield schemathesis.openapi.from_asgi("/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=25, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case):  # type: ignore[no-untyped-def]
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
