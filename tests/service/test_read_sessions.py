"""On SQLite the routes that only read take no write lock: they answer while another
connection holds it (a worker's tell, a warm start), instead of waiting for it and then
answering 503."""

from __future__ import annotations

import sqlite3

from .helpers import app_client, create_study


def test_reads_answer_while_a_writer_holds_the_lock_and_writes_wait(tmp_path):
    db = tmp_path / "r.db"
    with app_client(f"sqlite:///{db}", tmp_path, database_busy_seconds=0.5) as client:
        sid = create_study(client)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w"}).json()["trials"]
        writer = sqlite3.connect(db, isolation_level=None, timeout=0.5)
        writer.execute("BEGIN IMMEDIATE")  # another process's write transaction
        try:
            for path in ("", "/trials", f"/trials/{trial['id']}", "/batches", "/export",
                         "/history", "/dispatch"):
                response = client.get(f"/v1/studies/{sid}{path}")
                assert response.status_code == 200, (path, response.text)
            assert client.get("/v1/studies").status_code == 200
            assert client.get("/v1/summaries").status_code == 200
            blocked = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                                  json={"value": 1.0})
            assert blocked.status_code == 503  # writes still serialise
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        done = client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete",
                           json={"value": 1.0})
        assert done.status_code == 200


def test_the_dispatchers_passes_read_without_the_write_lock(tmp_path, redis_url):
    """The dispatcher lists dispatching studies and checks whether a top-up is due at every
    pass (every result wakes it): on SQLite those reads take no write lock, so they neither
    fail while another connection writes nor make the API's writers wait."""
    db = tmp_path / "d.db"
    with app_client(f"sqlite:///{db}", tmp_path, database_busy_seconds=0.5,
                    redis_url=redis_url) as client:
        sid = create_study(client, objective="function:branin")["id"]
        dispatcher = client.app.state.dispatcher
        dispatcher.redis.flushall()
        started = client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 4})
        assert started.status_code == 200, started.text
        writer = sqlite3.connect(db, isolation_level=None, timeout=0.5)
        writer.execute("BEGIN IMMEDIATE")
        try:
            assert dispatcher.studies() == [sid]
            assert isinstance(dispatcher._due(sid), bool)
            assert dispatcher.repair(sid) == 0
        finally:
            writer.execute("ROLLBACK")
            writer.close()
