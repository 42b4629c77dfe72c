"""Operating the server: the bbkb command, probes, metrics, limits on bad or huge input."""

from __future__ import annotations

import subprocess
import sys

from ..shared_http import http
from .helpers import app_client, create_study


def _bbkb(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=120)


def test_keys_created_by_the_command_open_the_api(tmp_path, server_factory):
    env = {"BBKB_DATA_DIR": str(tmp_path)}
    assert _bbkb("migrate", env=env).returncode == 0
    made = _bbkb("keys", "create", "--owner", "lab", env=env)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("bbkb_") and len(token) > 40
    server = server_factory(env)
    assert http.get(f"{server.url}/v1/studies").status_code == 401
    ok = http.get(f"{server.url}/v1/studies", headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 200 and ok.json() == {"studies": [], "next_after": None}


def test_help_everywhere():
    for args in (["--help"], ["serve", "--help"], ["keys", "create", "--help"]):
        result = _bbkb(*args, env={})
        assert result.returncode == 0 and "usage: bbkb" in result.stdout


def test_probes_and_metrics(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'm.db'}", tmp_path) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json() == {"status": "ready"}
        # no BBKB_REDIS_URL: nothing to dispatch to, said as such (not an error)
        assert client.get("/v1/queue").json()["redis"] == "not configured"
        sid = create_study(client)["id"]
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w"}).json()["trials"]
        client.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete", json={"value": 1.0})
        client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"})  # batch 2
        text = client.get("/metrics").text
        assert "bbkb_suggestions_total 2.0" in text
        assert 'bbkb_results_total{outcome="completed"} 1.0' in text
        assert "bbkb_batches_total 2.0" in text
        assert "bbkb_batch_open_seconds_count 2.0" in text
        batches = client.get(f"/v1/studies/{sid}/batches").json()["batches"]
        resampled = sum(b["resparsify_seconds"] is not None for b in batches)
        assert resampled >= 1 and f"bbkb_resparsify_seconds_count {resampled:.1f}" in text
        refits = sum(b["refit_seconds"] is not None for b in batches)
        assert f"bbkb_refit_seconds_count {refits:.1f}" in text
        assert 'route="/v1/studies/{study_id}/suggestions"' in text
        # a dispatch worker's result with no next trial is no suggestion (it counted as one)
        (job,) = client.post(f"/v1/studies/{sid}/suggestions",
                             json={"worker_id": "rq-manual"}).json()["trials"]
        r = client.post(f"/v1/studies/{sid}/dispatch/complete",
                        json={"trial_id": job["id"], "value": 2.0, "worker_id": "rq-manual"})
        assert r.status_code == 200 and r.json()["next"] is None, r.text
        text = client.get("/metrics").text
        assert "bbkb_suggestions_total 3.0" in text
        assert 'bbkb_results_total{outcome="completed"} 2.0' in text


def test_bad_input_is_a_4xx_with_a_field_never_a_500(tmp_path):
    with app_client(f"sqlite:///{tmp_path / 'b.db'}", tmp_path, max_json_bytes=10_000) as client:
        sid = create_study(client, candidates=[[0.1, 0.2], [0.3, 0.4]])["id"]
        cases = [
            ("post", "/v1/studies", {"name": "n", "candidates": [[1.0, 2.0], [1.0]]},
             422, "candidates"),
            ("post", "/v1/studies", {"name": "n", "candidates": []}, 422, "candidates"),
            ("post", "/v1/studies", {"name": "n", "candidates": [[1.0]],
                                     "engine": {"lam": -1}}, 422, "engine.lam"),
            ("post", "/v1/studies", {"name": "n", "candidates": [[1.0]],
                                     "engine": {"kernel": {"name": "rbf",
                                                           "lengthscale": 0}}},
             422, "engine.kernel.lengthscale"),
            ("post", "/v1/studies", {"name": "n", "candidates": [[1.0]],
                                     "engine": {"batch_threshold": 1}},
             422, "engine.batch_threshold"),
            ("post", "/v1/studies", {"name": "n", "candidates": [[1.0]],  # would go unused
                                     "engine": {"strategy": "gssbo",
                                                "kernel": {"name": "rbf", "lengthscale": 2}}},
             422, "engine.kernel"),
            ("post", "/v1/studies", {"name": "n", "candidates": [[1.0]],
                                     "engine": {"strategy": "go-ucb", "ard": True}},
             422, "engine.ard"),
            ("post", f"/v1/studies/{sid}/suggestions", {"worker_id": "w", "count": 0},
             422, "count"),
            ("post", f"/v1/studies/{sid}/trials/1/complete", {"value": "NaN"}, 422, "value"),
            ("post", "/v1/studies/99/suggestions", {"worker_id": "w"}, 404, "study_id"),
            ("get", "/v1/studies/abc", None, 422, "study_id"),
        ]
        for method, url, body, status, field in cases:
            r = client.request(method, url, json=body)
            assert (r.status_code, r.json().get("field")) == (status, field), (url, body, r.text)
        huge = client.post("/v1/studies", content=b"x" * 20_000,
                           headers={"content-type": "application/json"})
        assert huge.status_code == 413
        malformed = client.post("/v1/studies", content=b"{not json",
                                headers={"content-type": "application/json"})
        assert malformed.status_code == 422


BLAS_THREADS = """
from threadpoolctl import threadpool_info
from service.api.app import create_app
create_app()
print(max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"))
"""


def test_the_server_caps_its_blas_threads(tmp_path):
    """One BLAS thread by default, whatever started the process: on shared cores OpenBLAS
    threads spin-wait for each other (a first ask after a 4000-observation import took 70 s
    with two threads on a loaded 2-core machine, 1.4 s with one)."""
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env |= {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"}
    for setting, expected in ((None, 1), ("2", 2)):
        run_env = env if setting is None else {**env, "BBKB_BLAS_THREADS": setting}
        out = subprocess.run([sys.executable, "-c", BLAS_THREADS], capture_output=True,
                             text=True, env=run_env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert int(out.stdout.split()[-1]) == expected


def test_a_locked_database_is_a_503_to_retry_and_loses_nothing(tmp_path):
    """Another process holding SQLite's write lock past the busy timeout: 503 + Retry-After
    (the SDK retries it), the transaction rolled back; afterwards the same request works."""
    import sqlite3

    path = tmp_path / "busy.db"
    with app_client(f"sqlite:///{path}", tmp_path, database_busy_seconds=0.2) as client:
        sid = create_study(client)["id"]
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            r = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert "retry" in r.json()["detail"]
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        (trial,) = client.post(f"/v1/studies/{sid}/suggestions",
                               json={"worker_id": "w"}).json()["trials"]
        assert trial["t"] == 0  # the refused ask left no trace


def test_an_exhausted_connection_pool_is_a_retryable_503_and_not_ready(pg_database_url,
                                                                        tmp_path):
    """Every pooled PostgreSQL connection busy (another replica holding the studies' locks,
    a burst of requests): SQLAlchemy's pool TimeoutError is no OperationalError and was a 500,
    which the SDK and the workers do not retry (a worker's result was lost with it), and
    /readyz waited the pool's fixed 30 s. The pool's wait is BBKB_DATABASE_BUSY_SECONDS now,
    its size a setting, and both answer 503."""
    import time

    with app_client(pg_database_url, tmp_path, database_pool_size=1, database_max_overflow=0,
                    database_busy_seconds=0.5) as client:
        sid = create_study(client)["id"]
        engine = client.app.state.sessions.kw["bind"]
        with engine.connect():  # the pool's one connection, held
            started = time.monotonic()
            busy = client.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"})
            assert (busy.status_code, busy.headers.get("retry-after")) == (503, "1"), busy.text
            assert "no connection free" in busy.json()["detail"]
            ready = client.get("/readyz")
            assert ready.status_code == 503 and "QueuePool" in ready.json()["detail"]
            assert time.monotonic() - started < 20  # the 0.5 s waits, not 30 s ones
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.post(f"/v1/studies/{sid}/suggestions",
                           json={"worker_id": "w"}).status_code == 200


def test_readiness_does_not_wait_for_a_writer_on_sqlite(tmp_path):
    """/readyz ran SELECT 1 in a write session, BEGIN IMMEDIATE on SQLite: while a writer held
    the database (an ask may, for seconds) the probe waited BBKB_DATABASE_BUSY_SECONDS and
    answered 503 though the server answered every read at once."""
    import sqlite3

    db = tmp_path / "r.db"
    with app_client(f"sqlite:///{db}", tmp_path, database_busy_seconds=3) as client:
        create_study(client)
        writer = sqlite3.connect(db, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        try:
            assert client.get("/readyz").json() == {"status": "ready"}
        finally:
            writer.execute("ROLLBACK")
            writer.close()


def test_readiness_answers_within_its_deadline_when_the_database_hangs(tmp_path, monkeypatch):
    """A PostgreSQL that stops answering (a frozen host) held /readyz for minutes: the probe
    now says 503 at its deadline. (The hang is simulated: what is tested is the deadline.)"""
    import threading

    from service.api.routes import health

    release = threading.Event()
    monkeypatch.setattr(health, "READY_DEADLINE_SECONDS", 0.3)
    monkeypatch.setattr(health, "_select", lambda app: release.wait(10))
    with app_client(f"sqlite:///{tmp_path / 'h.db'}", tmp_path) as client:
        try:
            answer = client.get("/readyz")
            assert answer.status_code == 503
            assert answer.json()["detail"] == "the database did not answer within 0.3 s"
        finally:
            release.set()


def test_libpq_options_go_to_psycopg_only(monkeypatch):
    """The connect timeout and TCP keepalives are libpq's parameters: they went to every
    database but SQLite, and a driver without them (pg8000, MySQL's) would refuse every
    connection. (create_engine is stubbed: what is checked is what make_engine gives it.)"""
    from service.store import database

    given: dict[str, dict] = {}
    monkeypatch.setattr(database, "create_engine",
                        lambda url, **kwargs: given.setdefault(str(url.drivername), kwargs))
    for url in ("postgresql://u:p@h/db", "postgresql+pg8000://u:p@h/db",
                "mysql+pymysql://u:p@h/db", "postgresql://u:p@h/db?connect_timeout=3"):
        given.clear()
        database.make_engine(url)
        (kwargs,) = given.values()
        libpq = url.startswith("postgresql://")
        assert ("keepalives" in kwargs["connect_args"]) == libpq, url
        assert ("connect_timeout" in kwargs["connect_args"]) == (libpq and "?" not in url)
