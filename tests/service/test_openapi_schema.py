"""The published OpenAPI schema says what the server enforces, in JSON Schema's own keywords:
``n_candidates`` was published as ``{"type": "integer", "ge": 1, "le": 10000000}`` (pydantic's
names, which JSON Schema ignores), and no result value showed its +-1e100 limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.api.numbers import TEXT_PATTERN
from service.api.schemas import VALUE_LIMIT
from service.searchspace import BOUND

from .helpers import app_client

#: pydantic's constraint names: in a JSON Schema they are unknown keywords, ignored by clients
PYDANTIC_NAMES = {"ge", "le", "gt", "lt", "min_length", "max_length", "multiple_of",
                  "allow_inf_nan", "strict", "max_digits", "decimal_places"}
VALUES = {"minimum": -VALUE_LIMIT, "maximum": VALUE_LIMIT}


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("openapi")
    with app_client(f"sqlite:///{tmp / 'o.db'}", tmp) as client:
        return client.get("/openapi.json").json()


def _keywords(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, key) of every schema keyword; the names of properties are not keywords."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not path.endswith("/properties"):
                yield path, key
            yield from _keywords(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _keywords(value, f"{path}/{i}")


def _body(spec: dict[str, Any], path: str) -> dict[str, Any]:
    return spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


def test_no_constraint_is_published_under_pydantics_name(spec):
    assert [(path, key) for path, key in _keywords(spec) if key in PYDANTIC_NAMES] == []


def test_n_candidates_has_its_bounds_inside_the_optional(spec):
    field = spec["components"]["schemas"]["StudyCreate"]["properties"]["n_candidates"]
    integer, null = field["anyOf"]
    assert integer == {"type": "integer", "minimum": 1, "maximum": 10_000_000}
    assert null == {"type": "null"}


def test_values_and_numbers_publish_their_limit(spec):
    schemas = spec["components"]["schemas"]
    for model in ("CompleteRequest", "DispatchComplete"):
        assert schemas[model]["properties"]["value"] | VALUES == \
            schemas[model]["properties"]["value"], model
    results = _body(spec, "/v1/studies/{study_id}/results")  # inlined: read as raw bodies
    row = results["properties"]["results"]["items"]["properties"]["value"]["anyOf"][0]
    assert row == {"type": "number"} | VALUES
    observations = _body(spec, "/v1/studies/{study_id}/observations")
    observation = observations["properties"]["observations"]["items"]["properties"]["value"]
    assert observation["type"] == "number" and observation | VALUES == observation
    matrix = schemas["StudyCreate"]["properties"]["candidates"]["anyOf"][0]
    assert matrix["items"]["items"] == {"type": "number"} | VALUES


def test_a_parameter_publishes_its_keys_and_bounds(spec):
    parameter = spec["components"]["schemas"]["Parameter"]
    assert parameter["additionalProperties"] is False
    assert set(parameter["properties"]) == {"name", "type", "low", "high", "log", "choices"}
    name = parameter["properties"]["name"]
    assert (name["minLength"], name["maxLength"], name["pattern"]) == (1, 100, TEXT_PATTERN)
    for bound in ("low", "high"):
        assert parameter["properties"][bound]["anyOf"][0] == {
            "type": "number", "minimum": -BOUND, "maximum": BOUND}
