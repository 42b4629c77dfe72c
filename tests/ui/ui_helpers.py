"""Helpers of the dashboard tests: studies filled with results through the REST API."""

from __future__ import annotations

import numpy as np


def candidates(n: int = 120, d: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, d))


def objective(row: list[float] | np.ndarray) -> float:
    x = np.asarray(row, dtype=float)
    return float(np.exp(-np.sum((x - 0.6) ** 2) / 0.05))


def create_study(http, name: str = "s", **fields) -> dict:  # type: ignore[no-untyped-def]
    body = {"name": name, "candidates": candidates().tolist(),
            "engine": {"strategy": "bbkb", "mode": "sync", "seed": 3,
                       "kernel": {"name": "rbf", "lengthscale": 0.2}, "lam": 0.5}} | fields
    response = http.post("/v1/studies", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def run_trials(http, sid: int, n: int, value=None, fail_every: int = 0,  # type: ignore[no-untyped-def]
               count: int = 4) -> list[dict]:
    """Ask (``count`` at a time) and answer ``n`` trials, each ask's in reverse t order;
    every ``fail_every``-th fails for good with a reason.

    Returns the finished trials in the order they were answered.
    """
    value = value or (lambda trial: objective(list(trial["parameters"].values())))
    done: list[dict] = []
    while len(done) < n:
        ask = {"worker_id": "w", "count": min(count, n - len(done))}
        asked = http.post(f"/v1/studies/{sid}/suggestions", json=ask).json()["trials"]
        assert asked, "the study handed out no trial"
        for trial in reversed(asked):  # answered out of t order
            url = f"/v1/studies/{sid}/trials/{trial['id']}"
            if fail_every and (len(done) + 1) % fail_every == 0:
                answer = http.post(f"{url}/fail", json={
                    "reason": f"simulator crashed at t={trial['t']}", "retryable": False})
            else:
                answer = http.post(f"{url}/complete", json={"value": value(trial)})
            assert answer.status_code == 200, answer.text
            done.append(answer.json())
    return done
