"""Key scopes: a worker key (`bbkb keys create --scope worker`) reads its owner's studies and
asks for, heartbeats and reports trials, and is a 403 on every route that decides what is
evaluated; an owner key does everything; every /v1 route is one or the other."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from fastapi.routing import APIRoute
from sqlalchemy import select, text

from service.api import routes
from service.api.app import create_app
from service.api.deps import get_caller, get_owner, get_worker_owner
from service.auth import create_key
from service.settings import Settings
from service.store.database import make_engine, session_factory, transaction
from service.store.migrate import current, downgrade, head, upgrade
from service.store.models import ApiKey

from .helpers import app_client, create_study

#: The writes a worker key may send: asking for, heartbeating and reporting trials.
WORKER_WRITES = {
    ("POST", "/v1/studies/{study_id}/suggestions"),
    ("POST", "/v1/studies/{study_id}/trials/{trial_id}/complete"),
    ("POST", "/v1/studies/{study_id}/trials/{trial_id}/fail"),
    ("POST", "/v1/studies/{study_id}/trials/{trial_id}/heartbeat"),
    ("POST", "/v1/studies/{study_id}/results"),
    ("POST", "/v1/studies/{study_id}/results.csv"),
    ("POST", "/v1/studies/{study_id}/dispatch/complete"),
}
#: Pause a dispatch: a worker key may, naming the objective it cannot run (?objective=).
PAUSE = "/v1/studies/{study_id}/dispatch/pause"
#: The routes that read the caller's scope themselves: that pause, and the caller's account.
BY_ITSELF = [(PAUSE, {"POST"}), ("/v1/me", {"GET"})]


def _dependencies(route: APIRoute) -> set:
    """Every dependency callable of a route, nested ones included."""
    found, todo = set(), list(route.dependant.dependencies)
    while todo:
        dependant = todo.pop()
        found.add(dependant.call)
        todo += dependant.dependencies
    return found


def test_every_v1_route_takes_an_owner_key_or_is_a_read_or_a_worker_write(tmp_path):
    """A route added later without thinking of scopes fails here rather than let a worker key
    (or nobody) through: each /v1 route names get_owner or get_worker_owner, and the worker
    ones are the reads and the trial routes above."""
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'b.db'}", data_dir=tmp_path))
    served = {(method.upper(), path) for path, item in app.openapi()["paths"].items()
              for method in item if path.startswith("/v1/")}
    worker, owner = set(), set()
    for module in vars(routes).values():
        router = getattr(module, "router", None)
        for route in getattr(router, "routes", ()):
            if not isinstance(route, APIRoute) or not route.path.startswith("/v1/"):
                continue
            calls = _dependencies(route)
            if (route.path, route.methods) in BY_ITSELF:  # reads the caller's scope itself
                assert get_caller in calls and not {get_owner, get_worker_owner} & calls
                continue
            assert (get_owner in calls) != (get_worker_owner in calls), route.path
            for method in route.methods:
                (owner if get_owner in calls else worker).add((method, route.path))
    assert served - {(m, p) for p, (m,) in BY_ITSELF} <= worker | owner  # every route seen
    assert {(m, p) for m, p in worker if m != "GET"} == WORKER_WRITES
    assert all(m != "GET" for m, _ in owner)  # every read takes a worker key too
    assert ("DELETE", "/v1/studies/{study_id}") in owner
    assert ("POST", "/v1/studies/{study_id}/dispatch") in owner
    assert ("POST", PAUSE) in served


def test_a_worker_key_runs_trials_and_changes_no_study(database_url, tmp_path):
    with app_client(database_url, tmp_path, auth="keys") as client:
        with transaction(client.app.state.sessions) as session:
            owner_key = create_key(session, "lab")
            worker_key = create_key(session, "lab", "worker")
            other_worker = create_key(session, "elsewhere", "worker")
        as_owner = {"Authorization": f"Bearer {owner_key}"}
        as_worker = {"Authorization": f"Bearer {worker_key}"}
        client.headers.update(as_owner)
        sid = create_study(client, name="s", engine={"strategy": "bbkb", "mode": "async",
                                                     "seed": 0})["id"]
        base = f"/v1/studies/{sid}"

        client.headers.update(as_worker)  # the worker's whole round: read, ask, beat, report
        assert [s["id"] for s in client.get("/v1/studies").json()["studies"]] == [sid]
        trials = client.post(f"{base}/suggestions",
                             json={"worker_id": "w", "count": 3}).json()["trials"]
        assert len(trials) == 3
        first, second, third = (t["id"] for t in trials)
        assert client.post(f"{base}/trials/{first}/heartbeat").status_code == 200
        done = client.post(f"{base}/trials/{first}/complete", json={"value": 0.5})
        assert done.status_code == 200 and done.json()["status"] == "completed", done.text
        failed = client.post(f"{base}/trials/{second}/fail", json={"reason": "bench broke"})
        assert failed.status_code == 200, failed.text
        bulk = client.post(f"{base}/results", json={"results": [{"trial_id": third,
                                                                 "value": 0.25}]})
        assert bulk.status_code == 200 and bulk.json()["completed"] == 1, bulk.text
        for path in ("", "/trials", f"/trials/{first}", "/export", "/batches", "/best",
                     "/history", "/dispatch"):
            assert client.get(base + path).status_code == 200, path
        assert client.get("/v1/summaries").status_code == 200
        assert client.get("/v1/me").json() == {
            "owner": "lab", "scope": "worker", "studies": 1, "max_studies": None,
            "parallelism": 0, "max_parallelism": None}
        assert client.get("/v1/queue").status_code == 200

        refused = [  # everything that decides what is evaluated, or deletes it
            client.post("/v1/studies", json={"name": "new", "candidates": [[0.0], [1.0]]}),
            client.put(f"{base}/candidates", content=b"x"),
            client.post(f"{base}/pause"),
            client.post(f"{base}/resume"),
            client.delete(base),
            client.post(f"{base}/dispatch", json={"n_evaluations": 5,
                                                  "objective": "function:branin"}),
            client.post(f"{base}/dispatch/pause"),  # at large: an owner's decision
            client.post(f"{base}/dispatch/resume"),
            client.post(f"{base}/observations", json={"observations": [{"candidate": 0,
                                                                        "value": 1.0}]}),
            client.post(f"{base}/observations.csv", content=b"candidate,value\n0,1\n"),
        ]
        for answer in refused:
            assert answer.status_code == 403, (answer.request.url, answer.text)
            assert answer.json()["field"] == "authorization"
            assert "needs an owner key" in answer.json()["detail"]
        study = client.get(base).json()
        assert study["status"] == "active" and study["counts"].get("completed") == 2, study
        assert [s["name"] for s in client.get("/v1/studies").json()["studies"]] == ["s"]

        client.headers.update({"Authorization": f"Bearer {other_worker}"})
        assert client.get(base).status_code == 404  # scopes do not cross owners
        assert client.post(f"{base}/suggestions", json={"worker_id": "x"}).status_code == 404

        client.headers.update(as_owner)  # the owner key still may
        assert client.post(f"{base}/pause").status_code == 200
        assert client.delete(base).status_code == 204


def test_an_unknown_scope_is_refused(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'b.db'}")
    upgrade(engine)
    try:
        with transaction(session_factory(engine)) as session, \
                pytest.raises(ValueError, match="one of owner, worker; got 'admin'"):
            create_key(session, "lab", "admin")
    finally:
        engine.dispose()


def test_keys_made_before_scopes_are_owner_keys_and_a_downgrade_revokes_worker_keys(
        database_url, monkeypatch):
    """0009 adds the scope: every key stored before is an owner key (as it was); going back
    below it revokes the worker keys rather than widen them into owner keys, at the time in
    UTC whatever the database session's time zone (PGTZ: libpq's)."""
    monkeypatch.setenv("PGTZ", "America/New_York")
    engine = make_engine(database_url)
    try:
        upgrade(engine, "0008")
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO owners (id, name, created_at) "
                              "VALUES (1, 'lab', CURRENT_TIMESTAMP)"))
            conn.execute(text("INSERT INTO api_keys (owner_id, prefix, digest, created_at) "
                              "VALUES (1, 'bbkb_old', :d, CURRENT_TIMESTAMP)"), {"d": "0" * 64})
        upgrade(engine)
        assert current(engine) == head()
        with engine.begin() as conn:
            assert conn.execute(select(ApiKey.scope)).scalars().all() == ["owner"]
            conn.execute(text("INSERT INTO api_keys (owner_id, prefix, digest, scope, "
                              "created_at) VALUES (1, 'bbkb_wrk', :d, 'worker', "
                              "CURRENT_TIMESTAMP)"), {"d": "1" * 64})
        downgrade(engine, "0008")
        with engine.connect() as conn:
            revoked = dict(conn.execute(text("SELECT prefix, revoked_at FROM api_keys")).all())
        assert revoked["bbkb_old"] is None
        when = revoked["bbkb_wrk"]
        when = datetime.fromisoformat(when) if isinstance(when, str) else when
        assert abs(when - datetime.now(UTC).replace(tzinfo=None)) < timedelta(minutes=5), when
    finally:
        engine.dispose()


def test_scopes_do_not_change_what_keys_without_auth_may_do(database_url, tmp_path):
    """BBKB_AUTH=none: every caller is the local owner, with an owner's rights."""
    with app_client(database_url, tmp_path) as client:
        sid = create_study(client, name="s", candidates=np.eye(3).tolist())["id"]
        me = client.get("/v1/me").json()
        assert (me["owner"], me["scope"], me["studies"]) == ("local", "owner", 1)
        assert client.post(f"/v1/studies/{sid}/pause").status_code == 200
        assert client.delete(f"/v1/studies/{sid}").status_code == 204


def test_the_account_of_a_key_whose_scope_a_newer_server_made_is_still_an_answer(tmp_path):
    """A scope this server does not know (a newer server's, set in the database) was a 500 on
    GET /v1/me (its answer's model allowed two): the key is refused owner routes, and its
    account still answers, as its reads do."""
    with app_client(f"sqlite:///{tmp_path / 'k.db'}", tmp_path, auth="keys") as client:
        with transaction(client.app.state.sessions) as session:
            key = create_key(session, "lab", "worker")
            session.execute(text("UPDATE api_keys SET scope = 'reader'"))
        client.headers["Authorization"] = f"Bearer {key}"
        me = client.get("/v1/me")
        assert me.status_code == 200 and me.json()["scope"] == "reader", me.text
        assert client.get("/v1/studies").status_code == 200
        refused = client.post("/v1/studies", json={"name": "s", "candidates": [[0.0], [1.0]]})
        assert refused.status_code == 403
