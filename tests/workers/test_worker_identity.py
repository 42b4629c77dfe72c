"""A worker names whose key it holds once ready (GET /v1/me), and warns when that is an owner
key, which may create, pause, delete and dispatch, where a worker key is enough."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from service.processes import RedisProcess

from .test_worker_failures import _until


def _keys(env: dict[str, str], *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "service.cli", "keys", "create", *args],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("scope", ["worker", "owner"])
def test_a_ready_worker_names_its_keys_owner_and_scope(server_factory, tmp_path, scope):
    redis = RedisProcess().start()
    try:
        env = {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "keys"}
        server = server_factory(env)
        key = _keys(env, "--owner", "lab", "--scope", scope)
        log = tmp_path / "worker.log"
        with log.open("w") as stderr:
            worker = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "worker", "-n", "1", "--redis-url",
                 redis.url], stderr=stderr,
                env={**os.environ, "BBKB_URL": server.url, "BBKB_API_KEY": key,
                     "BBKB_LOG_FORMAT": "text"})
            _until(lambda: "worker ready" in log.read_text(), 60, "the ready line")
            worker.send_signal(signal.SIGTERM)
            try:
                assert worker.wait(timeout=30) == 0
            finally:
                worker.kill()
    finally:
        redis.stop()
    text = log.read_text()
    assert f"owner=lab scope={scope}" in text and key not in text, text
    warned = "this worker holds an owner key of 'lab'" in text
    assert warned == (scope == "owner"), text
    if warned:
        assert "bbkb keys create --owner lab --scope worker" in text


def test_against_a_server_without_the_account_route_the_check_still_authenticates(
        monkeypatch):
    """A worker newer than its server: GET /v1/me is a 404 there, and the start-up check falls
    back to the authenticated list it made before (a unit test of that logic: the server is
    a stand-in answering as a server from before /v1/me does)."""
    import httpx2

    import workers.job
    from client import Client

    asked = []

    def older_server(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.url.path)
        if request.url.path == "/v1/me":
            return httpx2.Response(404, json={"detail": "Not Found", "field": None})
        return httpx2.Response(200, json={"studies": [], "next_after": None})

    http = httpx2.Client(base_url="http://old", transport=httpx2.MockTransport(older_server))
    monkeypatch.setattr(workers.job, "_client", lambda: Client(http=http, api_key="bbkb_x"))
    assert workers.job.check_api() is None
    assert asked == ["/v1/me", "/v1/studies"]
