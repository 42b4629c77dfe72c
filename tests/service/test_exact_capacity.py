"""An exact-GP study past the engine's memory bound answers its asks with a 422 that names the
way on, and keeps its trials; the server goes on serving (it was an out-of-memory kill)."""

from __future__ import annotations

import numpy as np

from service.engine import exact

from .helpers import app_client, create_study


def test_a_gp_ucb_study_past_its_memory_answers_422_and_keeps_its_trials(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(exact, "EXACT_MEMORY_BYTES", 8 * 16 * (120 + 16))  # 16 selections
    with app_client(f"sqlite:///{tmp_path / 'c.db'}", tmp_path) as client:
        sid = create_study(client, name="exact", engine={
            "strategy": "gp-ucb", "mode": "async", "seed": 0,
            "kernel": {"name": "rbf", "lengthscale": 0.3}})["id"]
        answers = [client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": f"w{i}"}) for i in range(17)]
        assert [a.status_code for a in answers] == [200] * 16 + [422]
        refused = answers[-1].json()
        assert refused["field"] == "strategy" and "strategy bbkb" in refused["detail"]
        trials = client.get(f"/v1/studies/{sid}/trials").json()["trials"]
        assert len(trials) == 16  # nothing lost, nothing half-made
        done = client.post(f"/v1/studies/{sid}/trials/{trials[0]['id']}/complete",
                           json={"value": float(np.pi)})
        assert done.status_code == 200  # its results are still taken
        other = create_study(client, name="other")["id"]
        assert client.post(f"/v1/studies/{other}/suggestions",
                           json={"worker_id": "w"}).status_code == 200
