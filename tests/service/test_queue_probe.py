"""GET /v1/queue probes Redis once at a time: requests arriving meanwhile share its answer."""

from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.routes import queue as queue_routes
from service.settings import Settings


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
