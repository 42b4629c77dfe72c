"""Automatic kernel hyper-parameters through the service: stored per batch, shown in the API,
installed (not refit) after a server restart, so proposals stay exactly those of a live server."""

from __future__ import annotations

import io

import numpy as np

from ..shared_http import http
from .helpers import app_client, candidates, objective

STUDY = {"name": "auto", "candidates": (5.0 * candidates(200, 2, seed=8) - 2.0).tolist(),
         "engine": {"strategy": "bbkb", "mode": "sync", "seed": 2, "lam": 0.5}}


def _run(post, get, sid: int, steps: range) -> list[tuple]:  # type: ignore[no-untyped-def]
    log = []
    for _ in steps:
        trials = post(f"/v1/studies/{sid}/suggestions", {"worker_id": "w", "count": 4})["trials"]
        log += [(t["t"], t["candidate"], t["batch"]) for t in trials]
        for trial in trials:
            post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                 {"value": objective((np.array(list(trial["parameters"].values())) + 2) / 5)})
    return log


def _poster(client):  # type: ignore[no-untyped-def]
    """POST with a JSON body that must succeed; returns the answer's JSON."""
    def post(path: str, body: dict) -> dict:
        response = client.post(path, json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()
    return post


def test_hyperparameters_are_stored_shown_and_survive_a_restart(tmp_path, server_factory):
    with app_client(f"sqlite:///{tmp_path / 'ref.db'}", tmp_path) as client:
        ref_post = _poster(client)
        ref_sid = ref_post("/v1/studies", STUDY)["id"]
        assert client.get(f"/v1/studies/{ref_sid}").json()["spec"]["engine"][
            "hyperparameters"] == "auto"
        reference = _run(ref_post, client.get, ref_sid, range(36))
        ref_batches = client.get(f"/v1/studies/{ref_sid}/batches").json()["batches"]
        ref_study = client.get(f"/v1/studies/{ref_sid}").json()

    fitted = [b["hyperparameters"]["fitted_at"] for b in ref_batches]
    assert fitted[0] == 0 and len(set(fitted)) >= 3  # refit several times, batch by batch
    assert ref_batches[0]["hyperparameters"]["source"] == "start"
    assert {b["hyperparameters"]["source"] for b in ref_batches} <= {"start", "floor", "fit"}
    assert ref_study["hyperparameters"] == ref_batches[-1]["hyperparameters"]

    env = {"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'crash.db'}", "BBKB_AUTH": "none"}

    def poster(base: str):  # type: ignore[no-untyped-def]
        def post(path: str, body: dict) -> dict:
            response = http.post(base + path, json=body, timeout=60)
            assert response.status_code in (200, 201), response.text
            return response.json()
        return post

    server = server_factory(env)
    sid = poster(server.url)("/v1/studies", STUDY)["id"]
    before = _run(poster(server.url), None, sid, range(18))
    server.kill()
    server = server_factory(env)
    after = _run(poster(server.url), None, sid, range(18, 36))
    assert before + after == reference
    batches = http.get(f"{server.url}/v1/studies/{sid}/batches").json()["batches"]
    assert [b["hyperparameters"] for b in batches] == [b["hyperparameters"]
                                                       for b in ref_batches]


def test_a_studys_fit_can_be_fixed_in_a_new_study_one_lengthscale_per_column(tmp_path):
    """The lengthscales a study shows are what a new study's kernel takes: pasted as shown
    (a list, one per column or one for all) with ``hyperparameters: fixed``, every batch runs
    on them (``source: fixed``); a list that does not match the columns is a 422 naming
    ``engine.kernel.lengthscale``, inline, from a search space and on an upload."""
    with app_client(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path) as client:
        post = _poster(client)
        auto = post("/v1/studies", STUDY)["id"]
        _run(post, client.get, auto, range(24))
        shown = client.get(f"/v1/studies/{auto}").json()["hyperparameters"]
        assert shown["source"] in ("fit", "floor") and len(shown["lengthscale"]) == 1
        for name, lengthscale in (("copy", shown["lengthscale"]), ("per-column", [0.7, 3.0])):
            engine = STUDY["engine"] | {"hyperparameters": "fixed", "normalize": "zscore",
                                        "lam": shown["lam"],
                                        "kernel": {"name": "rbf", "lengthscale": lengthscale}}
            sid = post("/v1/studies", STUDY | {"name": name, "engine": engine})["id"]
            _run(post, client.get, sid, range(6))
            batches = client.get(f"/v1/studies/{sid}/batches").json()["batches"]
            assert {(tuple(b["hyperparameters"]["lengthscale"]), b["hyperparameters"]["lam"],
                     b["hyperparameters"]["source"]) for b in batches} == {
                (tuple(lengthscale), shown["lam"], "fixed")}

        wrong = {"kernel": {"name": "matern52", "lengthscale": [1.0, 2.0, 3.0]}}
        space = [{"name": n, "low": 0, "high": 1} for n in ("a", "b")]
        for body in ({"candidates": STUDY["candidates"]},
                     {"search_space": space, "n_candidates": 50}):
            r = client.post("/v1/studies", json={"name": "w", "engine": wrong} | body)
            assert r.status_code == 422 and r.json()["field"] == "engine.kernel.lengthscale"
            assert "3 values for candidates of 2 columns" in r.json()["detail"]
        sid = post("/v1/studies", {"name": "up", "engine": wrong, "upload": True})["id"]
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(STUDY["candidates"]))
        r = client.put(f"/v1/studies/{sid}/candidates", content=buffer.getvalue(),
                       headers={"content-type": "application/octet-stream"})
        assert r.status_code == 422 and r.json()["field"] == "engine.kernel.lengthscale"
