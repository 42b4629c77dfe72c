"""Every strategy of the engine is selectable through the REST API, in both modes (issue 3):
a study is created, asked and told through HTTP, and a new server rebuilds it and goes on.
GSSBO and GO-UCB have their own file (test_literature_strategies.py)."""

from __future__ import annotations

import pytest

from service.engine.config import STRATEGIES

from .helpers import app_client, create_study, run_rounds

KERNEL_FAMILY = [s for s in STRATEGIES if s not in ("gssbo", "go-ucb")]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("strategy", KERNEL_FAMILY)
def test_each_strategy_runs_through_the_api_and_survives_a_rebuild(tmp_path, strategy, mode):
    url = f"sqlite:///{tmp_path / 's.db'}"
    engine = {"strategy": strategy, "mode": mode, "seed": 4, "batch_size": 4,
              "kernel": {"name": "matern52", "lengthscale": 0.3}}
    with app_client(url, tmp_path) as client:
        sid = create_study(client, name=strategy, engine=engine)["id"]
        done = run_rounds(client, sid, 8)
        info = client.get(f"/v1/studies/{sid}").json()
        assert info["spec"]["engine"]["strategy"] == strategy
        assert info["counts"]["completed"] == len(done) >= 8
        assert client.get(f"/v1/studies/{sid}/best").json()["value"] == max(
            t["value"] for t in done)
    with app_client(url, tmp_path) as client:  # a new server rebuilds the engine from SQL
        assert len(run_rounds(client, sid, 2)) >= 1


def test_minimum_parallelism_opens_the_first_batch_that_wide(tmp_path):
    engine = {"strategy": "bbkb", "mode": "sync", "seed": 1, "min_parallelism": 6,
              "kernel": {"name": "rbf", "lengthscale": 0.3}}
    with app_client(f"sqlite:///{tmp_path / 'p.db'}", tmp_path) as client:
        sid = create_study(client, engine=engine)["id"]
        first = client.post(f"/v1/studies/{sid}/suggestions",
                            json={"worker_id": "w", "count": 20}).json()["trials"]
        assert len(first) >= 6 and {t["batch"] for t in first} == {first[0]["batch"]}
