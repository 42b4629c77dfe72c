"""The job's heartbeat thread stops once there is no lease left to keep (a real server
in-process, no Redis)."""

from __future__ import annotations

import logging
import threading

import numpy as np
from fastapi.testclient import TestClient

from client import Client
from service.api.app import create_app
from service.settings import Settings
from workers.job import _heartbeats


def test_the_heartbeat_thread_stops_when_its_study_is_deleted(tmp_path, caplog):
    """A deleted study's trial has no lease to keep: the thread logged a warning with a
    traceback every lease / 3 until the evaluation ended (hours, for a slow objective)."""
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
                              data_dir=tmp_path, auth="none"))
    with TestClient(app) as http:
        client = Client(http=http, retries=0)
        study = client.create_study("gone", candidates=np.random.default_rng(0).random((20, 2)))
        (trial,) = study.ask(worker_id="w").trials
        payload = {"study_id": study.id, "trial_id": trial.id, "worker_id": "w",
                   "lease_seconds": 0.15}
        stop = threading.Event()
        beats = threading.Thread(target=_heartbeats, args=(client, payload, stop), daemon=True)
        beats.start()
        beats.join(0.3)
        assert beats.is_alive()  # the lease is kept while the study exists
        study.delete()
        with caplog.at_level(logging.WARNING, logger="bbkb.worker"):
            beats.join(5.0)
        stop.set()
        assert not beats.is_alive()
        assert not [r for r in caplog.records if r.name == "bbkb.worker"]


def test_a_job_whose_study_the_key_cannot_see_is_skipped_with_a_warning_naming_the_key(
        tmp_path, caplog):
    """A worker started with another owner's key skipped every job at INFO, 'study 1 not
    found', while the dispatch waited forever: now a warning says what the cause may be."""
    from service.auth import create_key
    from service.store.database import transaction
    from workers.job import _evaluate

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}",
                              data_dir=tmp_path, auth="keys"))
    with TestClient(app) as http:
        with transaction(app.state.sessions) as session:
            lab, other = create_key(session, "lab"), create_key(session, "other")
        study = Client(http=http, api_key=lab, retries=0).create_study(
            "owned", candidates=np.random.default_rng(0).random((20, 2)))
        (trial,) = study.ask(worker_id="w").trials
        payload = {"study_id": study.id, "trial_id": trial.id, "worker_id": "w",
                   "lease_seconds": 60, "objective": "tests.workers.objective_fns:quadratic",
                   "candidate": trial.candidate, "vector": [0.0, 0.0], "parameters": {}}
        with caplog.at_level(logging.INFO, logger="bbkb.worker"):
            assert _evaluate(Client(http=http, api_key=other, retries=0), payload,
                             queued=True) is None
        (record,) = [r for r in caplog.records if r.name == "bbkb.worker"]
        assert record.levelno == logging.WARNING
        assert "BBKB_API_KEY" in record.getMessage() and "another owner" in record.getMessage()
        assert study.trial(trial.id).status == "running"  # untouched: not this key's to skip
