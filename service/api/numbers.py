"""JSON numbers, booleans and names for the request models (pydantic only, as the schemas).

Pydantic's lax mode turns the string ``"2"`` and ``true`` into the number 2: a candidate
matrix of strings or booleans, or ``"count": "2"``, was accepted. These types take JSON numbers
(and Python numbers, numpy's included) and refuse strings and booleans with the field named.
Floats use pydantic's own strict mode (in its compiled core: 3x faster on a candidate matrix
than a Python check per number); integers a check before lax validation, since strict mode
refuses numpy's integers. An integer is a JSON integer: ``72.0``, which lax mode took as 72, is
refused as a CSV upload's ``72.0`` is (a trial id or candidate index that went through a float
may have been rounded on the way).
"""

from __future__ import annotations

import re
from numbers import Integral, Real
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

#: A name or worker id: no control characters (C0, DEL, C1), no line or paragraph separators, and
#: none of the invisible characters that make two names look alike or reorder the text around
#: them (zero-width space, byte-order mark, bidirectional marks, embeddings, overrides and
#: isolates; the joiners U+200C and U+200D, which some scripts need, are allowed).
_HIDDEN = r"\x00-\x1f\x7f-\x9f\u200b\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff"
TEXT_PATTERN = rf"^[^{_HIDDEN}]+$"


def is_boolean(value: Any) -> bool:
    """A Python or numpy boolean (``numpy.bool_`` is no ``bool``, and pydantic's strict float
    takes it as 1.0: a comparison returned by mistake as the objective's value)."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def _number(value: Any) -> Any:
    if isinstance(value, str | bytes) or is_boolean(value):
        raise ValueError(f"expected a number, not a {type(value).__name__}")
    return value


def _plain(text: str) -> str:
    if hidden := re.search(f"[{_HIDDEN}]", text):
        raise ValueError(f"must not contain control or invisible characters (U+"
                         f"{ord(hidden.group()):04X} at {hidden.start()})")
    return text


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be blank (only spaces)")
    return text


def _integer(value: Any) -> Any:
    if type(value) is int:  # a JSON integer: the common case, first
        return value
    if isinstance(value, str | bytes) or is_boolean(value) or (
            isinstance(value, Real) and not isinstance(value, Integral)):
        raise ValueError(f"expected an integer, not a {type(value).__name__}")
    return value


JsonFloat = Annotated[float, Field(strict=True)]
#: A JSON integer, or a Python or numpy one: not a string, a boolean or a float (72.0 included).
JsonInt = Annotated[int, BeforeValidator(_integer)]
#: A single number given from Python (a result's value): a numpy boolean is refused too.
Number = BeforeValidator(_number)
NotBlank = AfterValidator(_not_blank)
#: A name or worker id: checked against TEXT_PATTERN (published as the schema's pattern).
PlainText = (Field(json_schema_extra={"pattern": TEXT_PATTERN}), AfterValidator(_plain))


def _boolean(value: Any) -> Any:
    return bool(value) if is_boolean(value) else value  # numpy's too, as the SDK may pass


#: A JSON boolean, or a Python or numpy one (lax mode also took "yes", "on" and 1).
JsonBool = Annotated[bool, Field(strict=True), BeforeValidator(_boolean)]
