"""Fuzzing the OpenAPI schema with schemathesis: whatever the input, never a 5xx, and every
answer is one the schema documents (status code, content type, body: what a client generated
from /openapi.json expects)."""

from __future__ import annotations

import warnings

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

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
def test_no_server_errors_and_every_answer_documented(case):  # type: ignore[no-untyped-def]
    case.call_and_validate(checks=[not_a_server_error, status_code_conformance,
                                   content_type_conformance, response_schema_conformance])
