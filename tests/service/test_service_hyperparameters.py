"""Automatic kernel hyper-parameters through the service: stored per batch, shown in the API,
installed (not refit) after a server restart, so proposals stay exactly those of a live server."""

from __future__ import annotations

import httpx2
import numpy as np

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


def test_hyperparameters_are_stored_shown_and_survive_a_restart(tmp_path, server_factory):
    with app_client(f"sqlite:///{tmp_path / 'ref.db'}", tmp_path) as client:
        def ref_post(path: str, body: dict) -> dict:
            response = client.post(path, json=body)
            assert response.status_code in (200, 201), response.text
            return response.json()

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

    def http(base: str):  # type: ignore[no-untyped-def]
        def post(path: str, body: dict) -> dict:
            response = httpx2.post(base + path, json=body, timeout=60)
            assert response.status_code in (200, 201), response.text
            return response.json()
        return post

    server = server_factory(env)
    sid = http(server.url)("/v1/studies", STUDY)["id"]
    before = _run(http(server.url), None, sid, range(18))
    server.kill()
    server = server_factory(env)
    after = _run(http(server.url), None, sid, range(18, 36))
    assert before + after == reference
    batches = httpx2.get(f"{server.url}/v1/studies/{sid}/batches").json()["batches"]
    assert [b["hyperparameters"] for b in batches] == [b["hyperparameters"]
                                                       for b in ref_batches]
