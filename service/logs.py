"""Structured logs: one JSON object per line (``BBKB_LOG_FORMAT=json``), or text for people.

Events carry their fields as ``extra`` (``log.info("batch opened", extra={"study_id": 3})``);
the JSON formatter writes every such field next to ``ts``, ``level``, ``logger`` and ``msg``, and
the text formatter appends them as ``key=value``. ``bbkb.access`` logs one line per request
(method, route, status, duration), replacing uvicorn's access log.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
#: The levels ``configure`` (and ``bbkb serve --log-level``, BBKB_LOG_LEVEL) accepts.
LEVELS = ("debug", "info", "warning", "error", "critical")

#: Attributes every LogRecord has; anything else on a record came in through ``extra``.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message",
                                                                             "asctime"}
#: Extras never written: uvicorn's ``color_message`` repeats ``msg`` with terminal escape codes.
_DROPPED = {"color_message"}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra`` fields of a record."""
    return {k: v for k, v in record.__dict__.items()
            if k not in _STANDARD and k not in _DROPPED and k[0] != "_"}


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", **extra, "exc"?}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage(), **fields(record)}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """The usual text line, then the extra fields as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={v}" for k, v in fields(record).items())
        return f"{line} {extra}" if extra else line


def check_level(level: str) -> str:
    """``level`` in lower case if it is one of :data:`LEVELS` (any case), else ValueError."""
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (choose from {', '.join(LEVELS)})")
    return level.lower()


def configure_variables(fmt: str, level: str) -> None:
    """:func:`configure` from the values of BBKB_LOG_FORMAT and BBKB_LOG_LEVEL, for processes
    that read them without Settings (``bbkb``'s commands, ``python -m workers.runner``);
    ValueError naming the variable whose value is bad."""
    if fmt not in ("text", "json"):
        raise ValueError(f"BBKB_LOG_FORMAT: expected text or json, got {fmt!r}")
    try:
        configure(fmt, level)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"BBKB_LOG_LEVEL: {exc}") from None


def configure(fmt: LogFormat = "text", level: str | int = "INFO") -> None:
    """Send every log record (ours, uvicorn's, rq's) to stderr in one format; ValueError for a
    level name not in :data:`LEVELS`."""
    if isinstance(level, str):
        level = check_level(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in ("uvicorn", "uvicorn.error", "rq.worker"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # bbkb.access replaces it
    for noisy in ("alembic", "httpx2", "httpcore2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
