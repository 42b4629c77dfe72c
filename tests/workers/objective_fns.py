"""Objectives importable by worker processes in the tests (``tests.workers.objective_fns:...``)."""

from __future__ import annotations

import math
import os
import time


def quadratic(x0: float, x1: float) -> float:
    return -((x0 - 0.3) ** 2) - (x1 - 0.7) ** 2


def slow(x0: float, x1: float) -> float:
    time.sleep(float(os.environ.get("BBKB_TEST_DELAY", "1.5")))
    return quadratic(x0, x1)


def flaky(x0: float, x1: float) -> float:
    if x0 < 0.3:
        raise RuntimeError("flaky instrument")
    return quadratic(x0, x1)


def nan(x0: float, x1: float) -> float:
    return math.nan if x0 < 0.5 else quadratic(x0, x1)


def text(x0: float, x1: float) -> str:
    return "not a number"


def hang(x0: float, x1: float) -> float:
    time.sleep(3600)
    return 0.0


def logged(x0: float, x1: float) -> float:
    """quadratic, appending one line per evaluation to $BBKB_TEST_LOG (counts evaluations),
    then taking $BBKB_TEST_DELAY seconds (default 0)."""
    with open(os.environ["BBKB_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(f"{x0!r} {x1!r}\n")
    time.sleep(float(os.environ.get("BBKB_TEST_DELAY", "0")))
    return quadratic(x0, x1)
