"""Helpers of the worker tests."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import numpy as np

from ..shared_http import http


def as_at_a_terminal(*ignored: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn``: the child starts with SIGINT, SIGTERM and SIGHUP at their defaults, as
    a command typed at a terminal does, whatever the test run inherited (a run under nohup
    ignores SIGHUP, a background job of a script SIGINT, and the code under test keeps an
    inherited SIG_IGN), then with ``ignored`` ignored."""
    def preexec() -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        for signum in ignored:
            signal.signal(signum, signal.SIG_IGN)
    return preexec


def dispatch_study(url: str, candidates: np.ndarray, objective: str, **fields: Any) -> int:
    """A BBKB study of ``candidates`` (columns x0, x1, ...) with ``objective``; its id."""
    body = {"name": "dispatch", "candidates": candidates.tolist(), "objective": objective,
            "parameter_names": [f"x{j}" for j in range(candidates.shape[1])],
            "lease_seconds": 10.0, "engine": {"strategy": "bbkb", "mode": "async", "seed": 0,
                                              "kernel": {"name": "rbf", "lengthscale": 0.3}}}
    r = http.post(f"{url}/v1/studies", json=body | fields)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])
