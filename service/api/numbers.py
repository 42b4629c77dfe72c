"""JSON numbers and names for the request models (pydantic only, as the schemas).

Pydantic's lax mode turns the string ``"2"`` and ``true`` into the number 2: a candidate
matrix of strings or booleans, or ``"count": "2"``, was accepted. These types take JSON numbers
(and Python numbers, numpy's included) and refuse strings and booleans with the field named.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator


def _number(value: Any) -> Any:
    if isinstance(value, str | bytes | bool):
        raise ValueError(f"expected a number, got {type(value).__name__} {value!r}")
    return value


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be blank (only spaces)")
    return text


JsonFloat = Annotated[float, BeforeValidator(_number)]
JsonInt = Annotated[int, BeforeValidator(_number)]
NotBlank = AfterValidator(_not_blank)
