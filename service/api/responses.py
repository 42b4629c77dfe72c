"""Answers of the hot write endpoints (ask, tell, dispatch results), serialised where made.

FastAPI validates and serialises a sync endpoint's return value in a second hop to the thread
pool. These endpoints build a pydantic answer anyway, so they dump it to JSON once, in the
request's own thread; the route's ``response_model`` still documents it in the OpenAPI schema.
"""

from __future__ import annotations

from fastapi import Response
from pydantic import BaseModel


def json_answer(model: BaseModel) -> Response:
    return Response(model.model_dump_json(by_alias=True), media_type="application/json")
