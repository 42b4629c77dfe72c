"""Helpers of the worker tests."""

from __future__ import annotations

from typing import Any

import httpx2
import numpy as np


def dispatch_study(url: str, candidates: np.ndarray, objective: str, **fields: Any) -> int:
    """A BBKB study of ``candidates`` (columns x0, x1, ...) with ``objective``; its id."""
    body = {"name": "dispatch", "candidates": candidates.tolist(), "objective": objective,
            "parameter_names": [f"x{j}" for j in range(candidates.shape[1])],
            "lease_seconds": 10.0, "engine": {"strategy": "bbkb", "mode": "async", "seed": 0,
                                              "kernel": {"name": "rbf", "lengthscale": 0.3}}}
    r = httpx2.post(f"{url}/v1/studies", json=body | fields)
    assert r.status_code == 201, r.text
    return int(r.json()["id"])
