"""Helpers for service tests: an in-process app client and a reference objective."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service.api.app import create_app
from service.settings import Settings


@contextlib.contextmanager
def app_client(database_url: str, tmp: Path, **settings) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    app = create_app(Settings(database_url=database_url, data_dir=tmp,
                              **({"auth": "none"} | settings)))
    with TestClient(app) as client:
        yield client


def candidates(n: int = 120, d: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, d))


def objective(row: list[float] | np.ndarray) -> float:
    x = np.asarray(row, dtype=float)
    return float(np.exp(-np.sum((x - 0.6) ** 2) / 0.05))


def create_study(client, name: str = "s", **fields) -> dict:  # type: ignore[no-untyped-def]
    body = {"name": name, "candidates": candidates().tolist(),
            "engine": {"strategy": "bbkb", "mode": "sync", "seed": 3,
                       "kernel": {"name": "rbf", "lengthscale": 0.2}, "lam": 0.5}} | fields
    response = client.post("/v1/studies", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def complete_trials(client, sid: int, trials: list[dict]) -> list[dict]:  # type: ignore[no-untyped-def]
    """Complete each handed-out trial with :func:`objective`; the completed trials."""
    done: list[dict] = []
    for trial in trials:
        r = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                        json={"value": objective(list(trial["parameters"].values()))})
        assert r.status_code == 200, r.text
        done.append(r.json())
    return done


def run_rounds(client, sid: int, rounds: int) -> list[dict]:  # type: ignore[no-untyped-def]
    """``rounds`` asks of 3 trials (one worker id per round), each completed with
    :func:`objective`; the completed trials."""
    done: list[dict] = []
    for i in range(rounds):
        answer = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": f"w{i}", "count": 3})
        assert answer.status_code == 200, answer.text
        done += complete_trials(client, sid, answer.json()["trials"])
    return done
