"""POST /v1/studies reads its body only once the caller is known, and parses it in the thread
pool: FastAPI parsed a declared body on the event loop before any dependency, so a 120 MB body
without a key held every request for 11 s before its 401, and one with a key validated 3 x 10^7
numbers (1.8 GB) before the ``max_inline_numbers`` check refused them."""

from __future__ import annotations

import numpy as np

from service.auth import create_key
from service.engine import EngineConfig, Strategy
from service.store.database import transaction

from .helpers import app_client, candidates


def test_a_body_without_a_key_is_refused_unread(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, auth="keys") as http:
        malformed = b'{"name": "x", "candidates": [[1.0], '  # parsed first, this was a 422
        answer = http.post("/v1/studies", content=malformed,
                           headers={"content-type": "application/json"})
        assert answer.status_code == 401, answer.text
        with transaction(http.app.state.sessions) as session:
            key = create_key(session, "lab")
        http.headers["Authorization"] = f"Bearer {key}"
        answer = http.post("/v1/studies", content=malformed,
                           headers={"content-type": "application/json"})
        assert (answer.status_code, answer.json()["field"]) == (422, "body")
        assert answer.json()["detail"].startswith("malformed JSON at character")
        body = {"name": "ok", "candidates": candidates().tolist(),
                "engine": {"strategy": "bbkb", "seed": 1}}
        created = http.post("/v1/studies", json=body)
        assert created.status_code == 201, created.text
        assert http.get(f"/v1/studies/{created.json()['id']}").json()["name"] == "ok"


def test_inline_numbers_are_counted_before_the_body_is_validated(tmp_path):
    """Over the limit, the count answers even where another field is wrong too (validated
    first, the body would answer for that field after validating every number)."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path,
                    max_inline_numbers=100) as http:
        rows = candidates(60, 2).tolist()
        answer = http.post("/v1/studies", json={"name": "x", "candidates": rows,
                                                "lease_seconds": "soon"})
        assert (answer.status_code, answer.json()["field"]) == (422, "candidates")
        assert "120 numbers inline" in answer.json()["detail"]
        answer = http.post("/v1/studies", json={"name": "x", "candidates": rows[:50],
                                                "lease_seconds": "soon"})
        assert (answer.status_code, answer.json()["field"]) == (422, "lease_seconds")
        assert http.get("/v1/studies").json()["studies"] == []


def test_a_body_that_is_not_utf8_is_a_422(tmp_path):
    """json.loads raised UnicodeDecodeError: a 500 (found by tests/service/test_fuzz.py)."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as http:
        for body in (b"\x80", b'{"name": "\xff"}'):
            answer = http.post("/v1/studies", content=body,
                               headers={"content-type": "application/json"})
            assert (answer.status_code, answer.json()["field"]) == (422, "body"), answer.text
            assert "not UTF-8" in answer.json()["detail"]
        digits = b'{"name": "h", "candidates": [[1' + b"0" * 5000 + b"]]}"  # json: ValueError
        answer = http.post("/v1/studies", content=digits,
                           headers={"content-type": "application/json"})
        assert (answer.status_code, answer.json()["field"]) == (422, "body"), answer.text
        assert answer.json()["detail"].startswith("malformed JSON: ")


def test_a_new_study_takes_lam_in_the_kernels_range_and_a_stored_one_still_loads(tmp_path):
    """lam 5e-324 made sigma^2 / lam inf. New studies take [1e-30, 1e30]; the engine's config
    itself does not check it, so that a study stored with another lam still loads and runs."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as http:
        for lam in (5e-324, 1e-31, 1e31):
            answer = http.post("/v1/studies", json={"name": "x", "candidates": [[0.0], [1.0]],
                                                    "engine": {"lam": lam}})
            assert (answer.status_code, answer.json()["field"]) == (422, "engine.lam")
        assert http.post("/v1/studies", json={"name": "x", "candidates": [[0.0], [1.0]],
                                              "engine": {"lam": 1e-30}}).status_code == 201
    stored = EngineConfig.from_dict({"lam": 1e31})
    strategy = Strategy(np.random.default_rng(0).random((20, 2)), stored)
    assert len(strategy.ask(3)) >= 1
