"""GET /v1/queue probes Redis once at a time (requests arriving meanwhile share its answer) and
shows each owner only the jobs of its own studies."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.routes import queue as queue_routes
from service.api.routes.queue import own_jobs
from service.auth import create_key
from service.settings import Settings
from service.store.database import transaction
from service.store.models import Study

from .helpers import app_client, create_study


def test_concurrent_queue_requests_share_one_probe(redis_url, tmp_path, monkeypatch):
    """Each request ran its own probe in the API's thread pool: with Redis hanging (2 s per
    probe), a burst of dashboards held as many threads as requests."""
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}",
                              redis_url=redis_url, auth="none", data_dir=tmp_path))
    real_state, real_probe = app.state.dispatcher.queue_state, queue_routes._probe
    probes, arrived, release = [], [], threading.Event()

    def held_state():  # type: ignore[no-untyped-def]
        probes.append(1)
        release.wait(timeout=30)
        return real_state()

    async def counted(app_):  # type: ignore[no-untyped-def]
        arrived.append(1)
        return await real_probe(app_)

    monkeypatch.setattr(app.state.dispatcher, "queue_state", held_state)
    monkeypatch.setattr(queue_routes, "_probe", counted)
    answers: list[dict] = []
    with TestClient(app) as client:
        burst = [threading.Thread(target=lambda: answers.append(client.get("/v1/queue").json()))
                 for _ in range(6)]
        for thread in burst:
            thread.start()
        deadline = time.monotonic() + 30
        while len(arrived) < 6 and time.monotonic() < deadline:  # all six wait on the probe
            time.sleep(0.01)
        release.set()
        for thread in burst:
            thread.join(timeout=30)
        assert len(arrived) == 6 and len(probes) == 1
        assert len(answers) == 6 and all(a == answers[0] for a in answers)
        assert answers[0]["redis"] == "ok"
        client.get("/v1/queue")  # once answered, the next request probes again
        assert len(probes) == 2
    app.state.sessions.kw["bind"].dispose()


def test_a_worker_shows_its_job_only_to_the_owner_of_its_study(tmp_path):
    """One pool of workers serves every owner, and a job id names its study: GET /v1/queue
    showed every owner the jobs of everyone's studies."""
    with app_client(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, auth="keys") as client:
        with transaction(client.app.state.sessions) as session:
            keys = {name: create_key(session, name) for name in ("alice", "bob")}
        sid = {}
        for name, key in keys.items():
            client.headers.update({"Authorization": f"Bearer {key}"})
            sid[name] = create_study(client, name="s")["id"]
        with transaction(client.app.state.sessions) as session:
            owner = {name: session.get(Study, sid[name]).owner_id for name in sid}
        workers = [{"name": n, "state": "busy", "current_job": job, "last_heartbeat": None}
                   for n, job in (("a", f"bbkb-{sid['alice']}-1-0"),
                                  ("b", f"bbkb-{sid['bob']}-2-1"),
                                  ("r", f"bbkb-{sid['alice']}-3-0-r1f2e"),
                                  ("x", "some-other-job"), ("i", None))]
        seen = {name: {w["name"]: w["current_job"]
                       for w in own_jobs(client.app, owner[name], workers)} for name in owner}
    assert seen["alice"] == {"a": f"bbkb-{sid['alice']}-1-0", "b": None,
                             "r": f"bbkb-{sid['alice']}-3-0-r1f2e", "x": None, "i": None}
    assert seen["bob"] == {"a": None, "b": f"bbkb-{sid['bob']}-2-1", "r": None, "x": None,
                           "i": None}
    assert workers[0]["current_job"] == f"bbkb-{sid['alice']}-1-0"  # the shared answer kept


@contextmanager
def slow_proxy(redis_url: str, delay: float) -> Iterator[str]:
    """A TCP relay to the real Redis at ``redis_url`` that holds each request ``delay`` seconds
    before passing it on: a Redis that answers every command, slowly. Yields its URL."""
    target = urlsplit(redis_url)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def pump(src: socket.socket, dst: socket.socket, wait: float) -> None:
        try:
            while chunk := src.recv(65536):
                time.sleep(wait)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (src, dst):
                end.close()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection((target.hostname, target.port))
            threading.Thread(target=pump, args=(client, server, delay), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, 0.0), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield target._replace(netloc=f"{target.netloc.rsplit('@', 1)[0]}@127.0.0.1:"
                                     f"{listener.getsockname()[1]}").geturl()
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_a_redis_too_slow_for_the_probe_is_reported_at_its_deadline(redis_url, tmp_path,
                                                                     monkeypatch):
    """Each command of the probe had its 2 s timeout, the probe none: a Redis answering every
    command, slowly, held a request for about 4 + 3 round trips per worker."""
    monkeypatch.setattr(queue_routes, "PROBE_DEADLINE_SECONDS", 0.5)
    with slow_proxy(redis_url, delay=0.3) as slow_url:
        app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'q.db'}",
                                  redis_url=slow_url, auth="none", data_dir=tmp_path))
        with TestClient(app) as client:
            answer = client.get("/v1/queue")
            assert answer.status_code == 200
            body = answer.json()
            assert body["redis"] == "unreachable"
            assert "too slowly" in body["detail"] and "0.5 s" in body["detail"]
            assert app.state.dispatcher.queue_state()["queued"] == 0  # it does answer
        app.state.sessions.kw["bind"].dispose()
