"""Every change is committed before its response is sent; CPU work (import parsing, candidate
sampling) stays off the event loop and within the memory limits."""

from __future__ import annotations

import json
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from service.api.app import create_app
from service.api.routes import trials as trial_routes
from service.searchspace import Parameter, SearchSpace
from service.settings import Settings

from .helpers import app_client, create_study

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


class StudiesWhenSent:
    """ASGI wrapper: when a response starts, read the studies through another connection."""

    def __init__(self, app, database_url: str) -> None:  # type: ignore[no-untyped-def]
        self.app, self.seen = app, []
        self.engine = create_engine(database_url, poolclass=NullPool)

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        async def spy(message):  # type: ignore[no-untyped-def]
            if message["type"] == "http.response.start":
                with self.engine.connect() as connection:
                    self.seen.append(dict(connection.execute(
                        text("SELECT name, status FROM studies")).all()))
            await send(message)
        await self.app(scope, receive, spy if scope["type"] == "http" else send)


def test_changes_are_committed_before_the_response_is_sent(database_url, tmp_path):
    app = create_app(Settings(database_url=database_url, data_dir=tmp_path, auth="none"))
    spy = StudiesWhenSent(app, database_url)
    with TestClient(spy) as client:
        sid = create_study(client, name="a")["id"]
        assert spy.seen[-1] == {"a": "active"}
        assert client.post(f"/v1/studies/{sid}/pause").status_code == 200
        assert spy.seen[-1] == {"a": "paused"}
        assert client.post(f"/v1/studies/{sid}/resume").status_code == 200
        assert spy.seen[-1] == {"a": "active"}
        assert client.delete(f"/v1/studies/{sid}").status_code == 204
        assert spy.seen[-1] == {f"a\x1fdeleted-{sid}": "deleted"}
    spy.engine.dispose()


def test_search_space_candidates_are_bounded_by_the_upload_limit(tmp_path):
    """3 feature columns, 2400 bytes: at most 100 candidates (a .npy of 100 x 3 float64)."""
    space = [{"name": "x", "low": 0, "high": 1},
             {"name": "c", "type": "categorical", "choices": ["a", "b"]}]
    with app_client(f"sqlite:///{tmp_path / 'b.db'}", tmp_path,
                    max_upload_bytes=2400) as client:
        over = client.post("/v1/studies", json={"name": "big", "search_space": space,
                                                "n_candidates": 101})
        assert over.status_code == 422 and over.json()["field"] == "n_candidates"
        assert client.get("/v1/studies").json()["studies"] == []
        ok = client.post("/v1/studies", json={"name": "ok", "search_space": space,
                                              "n_candidates": 100})
        assert ok.status_code == 201 and ok.json()["n_candidates"] == 100


def test_log_scale_integers_are_sampled_log_uniformly():
    def sample(log: bool) -> np.ndarray:
        space = SearchSpace(parameters=[Parameter(name="n", type="int", low=1, high=1024,
                                                  log=log)])
        return space.sample(4096, seed=0)[:, 0]

    x = sample(log=True)
    assert np.all(x == np.round(x)) and x.min() == 1 and x.max() <= 1024
    assert 24 <= np.median(x) <= 42  # log-uniform on [1, 1025): median sqrt(1025) ~ 32
    assert abs(np.mean(x <= 1) - np.log(2) / np.log(1025)) < 0.02  # P(1) = log 2 / log 1025
    assert 450 <= np.median(sample(log=False)) <= 575  # linear stays uniform


def test_a_small_discrete_space_gives_each_point_once(tmp_path):
    """The audit: an int (4 values) x categorical (2) space with n_candidates 1000 reported
    1000 candidates for 8 distinct points, and handed out identical configurations as
    different candidates. An entirely discrete space gives distinct points: each once if it has
    at most n_candidates (n_candidates says how many), else the first n distinct Sobol draws;
    other spaces are drawn as before."""
    from service.store import queries
    from service.store.database import transaction

    space = [{"name": "layers", "type": "int", "low": 1, "high": 4},
             {"name": "act", "type": "categorical", "choices": ["relu", "tanh"]}]
    with app_client(f"sqlite:///{tmp_path / 'd.db'}", tmp_path) as client:
        def create(name: str, n: int, parameters: list[dict]) -> np.ndarray:
            r = client.post("/v1/studies", json={"name": name, "n_candidates": n,
                                                 "search_space": parameters})
            assert r.status_code == 201, r.text
            with transaction(client.app.state.sessions) as session:
                stored = queries.load_candidates(session, r.json()["id"])
            assert r.json()["n_candidates"] == len(stored)
            return stored

        disc = create("disc", 1000, space)
        assert len(disc) == 8 and len(np.unique(disc, axis=0)) == 8
        decoded = {tuple(SearchSpace(parameters=space).decode(row).values()) for row in disc}
        assert decoded == {(k, a) for k in range(1, 5) for a in ("relu", "tanh")}
        assert len(create("exact", 8, space)) == 8
        assert len(np.unique(create("odd", 15, [{"name": "k", "type": "int", "low": 1,
                                                  "high": 15, "log": True}]), axis=0)) == 15
        # more points than n_candidates: n distinct ones, the first distinct Sobol draws
        seed = client.get("/v1/studies").json()["studies"][0]["spec"]["engine"]["seed"]
        few = create("few", 6, space)
        assert len(np.unique(few, axis=0)) == 6 and set(map(tuple, few)) <= set(map(tuple, disc))
        log_int = [{"name": "k", "type": "int", "low": 1, "high": 1000, "log": True}]
        drawn = SearchSpace(parameters=log_int).sample(100, seed)
        assert len(np.unique(drawn, axis=0)) < 90  # plain draws repeat the small integers
        assert len(np.unique(create("log", 100, log_int), axis=0)) == 100
        # a float parameter: n Sobol draws, as before
        mixed = space + [{"name": "lr", "low": 1e-4, "high": 0.1, "log": True}]
        assert np.array_equal(create("mixed", 1000, mixed),
                              SearchSpace(parameters=mixed).sample(1000, seed))


def test_integer_parameters_stay_within_their_bounds(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'i.db'}", tmp_path) as client:
        r = client.post("/v1/studies", json={"name": "s", "n_candidates": 8, "search_space": [
            {"name": "k", "type": "int", "low": 0.2, "high": 0.8}]})
        assert r.status_code == 422
        r = client.post("/v1/studies", json={"name": "s", "n_candidates": 64, "search_space": [
            {"name": "k", "type": "int", "low": 0.5, "high": 7.5, "log": True}]})
        assert r.status_code == 201
        asked = client.post(f"/v1/studies/{r.json()['id']}/suggestions",
                            json={"worker_id": "w", "count": 8}).json()["trials"]
        assert asked and {t["parameters"]["k"] for t in asked} <= set(range(1, 8))


def _import_body(kind: str, n: int) -> tuple[bytes, str]:
    rows = [(i % 120, float(np.sin(i))) for i in range(n)]
    if kind == "csv":
        return ("candidate,value\n" + "".join(f"{a},{v}\n" for a, v in rows)).encode(), "text/csv"
    return json.dumps({"observations": [{"candidate": a, "value": v} for a, v in rows]}).encode(), \
        "application/json"


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_an_import_is_parsed_while_the_event_loop_answers(kind, tmp_path, monkeypatch):
    """The parse waits until /healthz has answered: on the event loop it would block it."""
    order: list[str] = []
    parsing, answered = threading.Event(), threading.Event()
    name = f"parse_observations_{kind}"
    parse = getattr(trial_routes, name)

    def parse_after_healthz(raw: bytes) -> list[tuple[int, float]]:
        parsing.set()
        answered.wait(20)
        order.append("parsed")
        return parse(raw)

    monkeypatch.setattr(trial_routes, name, parse_after_healthz)
    body, content_type = _import_body(kind, 5000)
    path = "observations.csv" if kind == "csv" else "observations"
    with app_client(f"sqlite:///{tmp_path / 'p.db'}", tmp_path) as client:
        sid = create_study(client)["id"]
        with ThreadPoolExecutor(1) as pool:
            imported = pool.submit(client.post, f"/v1/studies/{sid}/{path}", content=body,
                                   headers={"content-type": content_type})
            assert parsing.wait(20)
            assert client.get("/healthz").status_code == 200
            order.append("healthz")
            answered.set()
            assert imported.result().json() == {"imported": 5000}
    assert order == ["healthz", "parsed"]


def test_json_import_errors_name_their_field(tmp_path, monkeypatch):
    monkeypatch.setattr(trial_routes, "CHUNK_ROWS", 4)  # rows are validated 4 at a time
    monkeypatch.setattr(trial_routes, "_max_rows", lambda envelope, key: 10)  # at most 10
    with app_client(f"sqlite:///{tmp_path / 'e.db'}", tmp_path, max_json_bytes=10_000) as client:
        sid = create_study(client)["id"]
        url = f"/v1/studies/{sid}/observations"
        good = {"candidate": 1, "value": 1.0}
        cases = [({"observations": [{"candidate": -1, "value": 1.0}]}, "observations.0.candidate"),
                 ({"observations": [{"candidate": 1, "value": "x"}]}, "observations.0.value"),
                 ({"observations": []}, "observations"),
                 ({"observations": [{"candidate": 1, "value": 1.0, "z": 1}]}, "observations.0.z"),
                 ({"observations": [good], "extra": 1}, "extra"),
                 ({"rows": [good]}, "observations"),
                 ([good], None),
                 ({"observations": [good] * 6 + [{"candidate": 1}]}, "observations.6.value"),
                 ({"observations": [good] * 11}, "observations"),
                 ({"observations": [{"candidate": 500, "value": 1.0}]}, "observations.0.candidate")]
        for body, field in cases:
            r = client.post(url, json=body)
            assert (r.status_code, r.json()["field"]) == (422, field), (body, r.text)
        assert client.post(url, content=b"{not json").status_code == 422

        def chunks():  # no Content-Length: the size is checked while reading
            for _ in range(20):
                yield b" " * 1000

        for path in (url, f"{url}.csv"):
            r = client.post(path, content=chunks())
            assert (r.status_code, r.json()["field"]) == (413, "body")
        assert client.get(f"/v1/studies/{sid}").json()["n_trials"] == 0
        assert client.post(url, json={"observations": [good] * 10}).json() == {"imported": 10}
