"""A module the allow-list tests' workers must not import (tests.workers.test_objective_modules):
importing it leaves a file ``imported`` and calling :func:`touch` a file ``called`` in
``BBKB_TEST_MARKS`` (when set), so a test can tell that a worker refused it before any import."""

from __future__ import annotations

import os
from pathlib import Path

if os.environ.get("BBKB_TEST_MARKS"):
    Path(os.environ["BBKB_TEST_MARKS"], "imported").touch()


def touch(x0: float, x1: float) -> float:
    Path(os.environ["BBKB_TEST_MARKS"], "called").touch()
    return x0 - x1
