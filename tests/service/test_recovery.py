"""Crash recovery and several processes: the database is the truth.

A server killed with SIGKILL mid-batch, then restarted, must lose no completed result and propose
exactly what an uninterrupted server would; two server processes on one PostgreSQL database must
hand out the same trials as one.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx2
import numpy as np

from ..shared_http import http
from .helpers import app_client, candidates, objective

Post = Callable[[str, dict], dict]
STUDY = {"name": "crash", "candidates": candidates(200, 2, seed=4).tolist(),
         "engine": {"strategy": "bbkb", "mode": "async", "seed": 7, "lam": 0.5,
                    "kernel": {"name": "rbf", "lengthscale": 0.2}}}


def _script(post: Post, sid: int, steps: range, held: list[dict] | None = None) -> list[tuple]:
    """A deterministic interleaving: three workers ask, results arrive late and out of order.

    ``held`` is the client side's in-flight trials; it survives a server restart, as workers
    keep their trials until the server is back.
    """
    log: list[tuple] = []
    held = [] if held is None else held
    for step in steps:
        worker = f"w{step % 3}"
        trials = post(f"/v1/studies/{sid}/suggestions", {"worker_id": worker, "count": 2})
        log += [(t["t"], t["candidate"], t["batch"]) for t in trials["trials"]]
        held += trials["trials"]
        if step % 2 == 1:  # complete the oldest held trials, newest first
            for trial in reversed(held[:3]):
                post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                     {"value": objective(list(trial["parameters"].values()))})
            del held[:3]
    return log


def _http_post(base: str) -> Post:
    def post(path: str, body: dict) -> dict:
        r = http.post(base + path, json=body, timeout=30)
        assert r.status_code in (200, 201), r.text
        return r.json()
    return post


def test_sigkill_mid_batch_then_restart_proposes_what_an_uninterrupted_server_would(
        tmp_path, server_factory):
    with app_client(f"sqlite:///{tmp_path / 'ref.db'}", tmp_path) as client:
        def ref_post(path: str, body: dict) -> dict:
            return client.post(path, json=body).json()
        ref_sid = ref_post("/v1/studies", STUDY)["id"]
        reference = _script(ref_post, ref_sid, range(30))

    env = {"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'crash.db'}", "BBKB_AUTH": "none"}
    server = server_factory(env)
    post = _http_post(server.url)
    sid = post("/v1/studies", STUDY)["id"]
    in_flight: list[dict] = []
    before = _script(post, sid, range(13), in_flight)  # stops with trials pending and unfolded
    completed = http.get(f"{server.url}/v1/studies/{sid}").json()["counts"]["completed"]
    pending = http.get(f"{server.url}/v1/studies/{sid}").json()["counts"]["running"]
    assert completed > 0 and pending > 0
    server.kill()

    server = server_factory(env)
    post = _http_post(server.url)
    info = http.get(f"{server.url}/v1/studies/{sid}").json()
    assert info["counts"]["completed"] == completed  # no completed result lost
    after = _script(post, sid, range(13, 30), in_flight)
    assert before + after == reference


def test_two_server_processes_on_postgres_hand_out_what_one_would(
        pg_database_url, postgres_server, tmp_path, server_factory):
    from tests.conftest import _fresh_pg_database

    with _fresh_pg_database(postgres_server) as url, app_client(url, tmp_path) as client:
        def one(path: str, body: dict) -> dict:
            return client.post(path, json=body).json()
        ref_sid = one("/v1/studies", STUDY)["id"]
        reference = _script(one, ref_sid, range(24))

    env = {"BBKB_DATABASE_URL": pg_database_url, "BBKB_AUTH": "none"}
    servers = [_http_post(server_factory(env).url), _http_post(server_factory(env).url)]
    calls = iter(range(10**6))

    def alternate(path: str, body: dict) -> dict:
        return servers[next(calls) % 2](path, body)

    sid = alternate("/v1/studies", STUDY)["id"]
    assert _script(alternate, sid, range(24)) == reference


def test_concurrent_workers_never_duplicate_or_lose_anything(tmp_path, server_factory):
    """50 clients asking and telling at once on one study."""
    from concurrent.futures import ThreadPoolExecutor

    from service.engine import EngineConfig, Strategy
    from service.store import queries
    from service.store.database import make_engine, session_factory

    db = tmp_path / "busy.db"
    server = server_factory({"BBKB_DATABASE_URL": f"sqlite:///{db}", "BBKB_AUTH": "none"})
    post = _http_post(server.url)
    study = post("/v1/studies", STUDY | {"name": "busy"})
    sid = study["id"]

    def worker(k: int) -> list[int]:
        mine = []
        with httpx2.Client(base_url=server.url, timeout=60) as api:
            for _ in range(6):
                trials = api.post(f"/v1/studies/{sid}/suggestions",
                                  json={"worker_id": f"w{k}", "count": 1 + k % 3}).json()
                for trial in trials["trials"]:
                    value = objective(list(trial["parameters"].values()))
                    r = api.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                                 json={"value": value})
                    assert r.status_code == 200, r.text
                    mine.append(trial["id"])
        return mine

    with ThreadPoolExecutor(50) as pool:
        handed = [i for ids in pool.map(worker, range(50)) for i in ids]
    assert len(handed) == len(set(handed))  # each trial handed to one worker once
    info = http.get(f"{server.url}/v1/studies/{sid}").json()
    assert info["counts"]["completed"] == len(handed) == info["n_trials"]
    batches = http.get(f"{server.url}/v1/studies/{sid}/batches").json()["batches"]
    assert sum(b["size"] for b in batches) == info["n_trials"]
    # the stored state rebuilds an engine consistent with every stored row
    engine = make_engine(f"sqlite:///{db}")
    with session_factory(engine)() as session:
        state = queries.load_engine_state(session, sid, 1.0)
        X = queries.load_candidates(session, sid)
    rebuilt = Strategy.restore(X, EngineConfig.from_dict(info["spec"]["engine"]), state)
    assert rebuilt.replay_mismatches == 0
    assert np.all(np.isfinite(state.records["value"]))
    engine.dispose()


def test_two_api_processes_catch_up_instead_of_rebuilding(tmp_path):
    """Two apps on one database, asked alternately (the compose api's uvicorn processes), on a
    study with batches of 8 (Thompson sampling from the frozen posterior): the same trials as one
    app, and a cached engine made stale by the other app catches up from the
    rows that changed; it is rebuilt only when the other app opened a batch meanwhile, not at
    every change (a rebuild reads every trial)."""
    study = STUDY | {"engine": STUDY["engine"] | {"strategy": "thompson", "batch_size": 8}}
    with app_client(f"sqlite:///{tmp_path / 'one.db'}", tmp_path) as client:
        def one(path: str, body: dict) -> dict:
            return client.post(path, json=body).json()
        reference = _script(one, one("/v1/studies", study)["id"], range(24))

    url = f"sqlite:///{tmp_path / 'two.db'}"
    with app_client(url, tmp_path) as a, app_client(url, tmp_path) as b:
        loads = [0]
        for client in (a, b):
            runtimes = client.app.state.runtimes
            runtimes.load = _counting(runtimes.load, loads)
        calls = iter(range(10**6))

        def alternate(path: str, body: dict) -> dict:
            response = (a, b)[next(calls) % 2].post(path, json=body)
            assert response.status_code in (200, 201), response.text
            return response.json()

        sid = alternate("/v1/studies", study)["id"]
        assert _script(alternate, sid, range(24)) == reference
        batches = len(a.get(f"/v1/studies/{sid}/batches").json()["batches"])
        assert next(calls) > 4 * batches  # most requests found the study changed by the other
        assert loads[0] <= 2 * batches + 2


def _counting(load: Callable, loads: list[int]) -> Callable:
    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        loads[0] += 1
        return load(*args, **kwargs)
    return counted


def test_a_server_keeps_at_most_cached_studies_engines(tmp_path):
    """BBKB_CACHED_STUDIES bounds the engines (and candidate matrices) a process holds: the least
    recently used is evicted and rebuilt from the database at its next use, proposing what a
    server that never evicted it would."""
    def run(cached: int, db: str) -> tuple[list[tuple], int]:
        with app_client(f"sqlite:///{tmp_path / db}", tmp_path, cached_studies=cached) as client:
            runtimes = client.app.state.runtimes
            loads = [0]
            runtimes.load = _counting(runtimes.load, loads)

            def post(path: str, body: dict) -> dict:
                return client.post(path, json=body).json()
            sids = [post("/v1/studies", STUDY | {"name": f"s{i}"})["id"] for i in range(3)]
            log: list[tuple] = []
            for step in range(4):  # round robin: with 2 engines kept, every use is a miss
                for sid in sids:
                    log += _script(post, sid, range(step * 2, step * 2 + 2))
            assert len(runtimes._cache) <= cached
            return log, loads[0]

    evicting, misses = run(2, "two.db")
    keeping, loads = run(3, "three.db")
    assert evicting == keeping
    assert loads == 3 and misses == 3 * 4  # every round-robin use missed
