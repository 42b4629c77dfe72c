"""GSSBO and GO-UCB are selectable through the REST API like BBKB (issue 5)."""

from __future__ import annotations

import pytest

from .helpers import app_client, create_study, run_rounds

ENGINES = {
    "gssbo": {"strategy": "gssbo", "gssbo_initial": 4, "gssbo_buffer": 8, "mode": "sync",
              "seed": 1},
    "rssbo": {"strategy": "gssbo", "gssbo_initial": 4, "gssbo_buffer": 8,
              "gssbo_selection": "random", "mode": "async", "batch_rule": "fixed",
              "batch_size": 3, "seed": 1},
    "go-ucb": {"strategy": "go-ucb", "horizon": 16, "goucb_hidden": 5, "mode": "sync",
               "seed": 2, "batch_rule": "product", "batch_threshold": 1.5},
}


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_study_runs_with_each_literature_strategy(database_url, tmp_path, name):
    with app_client(database_url, tmp_path) as client:
        study = create_study(client, name=name, engine=ENGINES[name])
        done = run_rounds(client, study["id"], 8)
        info = client.get(f"/v1/studies/{study['id']}").json()
        assert info["counts"]["completed"] == len(done) >= 8
        assert info["n_batches"] >= 2  # past the initial design / Phase I
        best = client.get(f"/v1/studies/{study['id']}/best").json()
        assert best["value"] == max(t["value"] for t in done)
        batches = client.get(f"/v1/studies/{study['id']}/batches").json()["batches"]
        if name == "go-ucb":  # a network, no kernel: no hyper-parameters to show
            assert info["hyperparameters"] is None
            assert all(b["hyperparameters"] is None for b in batches)
        else:  # GSSBO's own fit at the latest batch (the engine's start values before)
            assert info["hyperparameters"] == batches[-1]["hyperparameters"]
            assert info["hyperparameters"]["source"] == "fit"
            assert 0 < info["hyperparameters"]["fitted_at"] <= len(done)
    with app_client(database_url, tmp_path) as client:  # a new server rebuilds the engine
        assert len(run_rounds(client, study["id"], 2)) >= 1
        again = client.get(f"/v1/studies/{study['id']}").json()["hyperparameters"]
        assert (again is None) == (name == "go-ucb")


@pytest.mark.parametrize(("engine", "field"), [
    ({"strategy": "gssbo", "gssbo_selection": "cosine"}, "engine.gssbo_selection"),
    ({"strategy": "gssbo", "gssbo_buffer": 3}, "engine.gssbo_buffer"),
    ({"strategy": "go-ucb", "goucb_beta": -2}, "engine.goucb_beta"),
    ({"strategy": "go-ucb", "horizon": 2}, "engine.horizon"),
])
def test_bad_literature_configurations_are_422_with_the_field(database_url, tmp_path, engine,
                                                              field):
    with app_client(database_url, tmp_path) as client:
        r = client.post("/v1/studies", json={"name": "bad", "candidates": [[0.0], [1.0]],
                                             "engine": engine})
        assert r.status_code == 422 and r.json()["field"] == field, r.text
