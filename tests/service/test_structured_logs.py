"""Structured logs: JSON lines from a real ``bbkb serve`` process, and the formatters."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import httpx2

from service.logs import JsonFormatter, TextFormatter
from service.processes import free_port

from ..shared_http import http


def _record(**extra) -> logging.LogRecord:  # type: ignore[no-untyped-def]
    record = logging.LogRecord("bbkb.test", logging.WARNING, __file__, 1, "value %s", (3,), None)
    record.__dict__.update(extra)
    return record


def test_json_formatter_writes_one_object_with_the_extra_fields():
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record(study_id=7, seconds=0.25)
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    event = json.loads(line)
    assert (event["level"], event["logger"], event["msg"]) == ("warning", "bbkb.test", "value 3")
    assert (event["study_id"], event["seconds"]) == (7, 0.25)
    assert "ValueError: boom" in event["exc"] and event["ts"].endswith("+00:00")


def test_text_formatter_appends_the_extra_fields():
    line = TextFormatter().format(_record(study_id=7))
    assert line.endswith("bbkb.test value 3 study_id=7")


def test_bbkb_serve_logs_json_lines_for_requests_and_batches(tmp_path):
    port = free_port()
    env = {**os.environ, "BBKB_LOG_FORMAT": "json", "BBKB_DATA_DIR": str(tmp_path)}
    env.pop("BBKB_DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--no-auth",
                             "--port", str(port)], env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx2.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.1)
        with httpx2.Client(base_url=url) as api:
            sid = api.post("/v1/studies", json={"name": "logs", "candidates": [[0.0], [1.0]]}
                           ).json()["id"]
            trial = api.post(f"/v1/studies/{sid}/suggestions", json={"worker_id": "w"}
                             ).json()["trials"][0]
            api.post(f"/v1/studies/{sid}/trials/{trial['id']}/complete", json={"value": 1.5})
            assert api.get("/v1/studies/999").status_code == 404
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    events = [json.loads(line) for line in err.splitlines() if line.strip()]  # all JSON
    access = [e for e in events if e["logger"] == "bbkb.access"]
    routes = {(e["route"], e["status"]) for e in access}
    assert ("/v1/studies/{study_id}/suggestions", 200) in routes
    assert ("/v1/studies/{study_id}", 404) in routes
    complete = next(e for e in access if e["route"].endswith("/complete"))
    assert complete["study_id"] == sid and complete["trial_id"] == trial["id"]
    assert complete["ms"] > 0
    assert any(e["msg"] == "batch opened" and e["study_id"] == sid for e in events)
    assert not any(e["logger"] == "uvicorn.access" for e in events)
    # the readiness polls above are not logged at INFO (a load balancer's would flood it)
    assert not any(e["route"] == "/readyz" for e in access)


def test_access_log_keeps_odd_path_ids_as_text_and_never_turns_a_4xx_into_a_500(
        tmp_path, caplog):
    from service.api.app import create_app
    from service.settings import Settings

    from .helpers import TestClient

    caplog.set_level(logging.INFO, logger="bbkb.access")
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", auth="none",
                              data_dir=tmp_path))
    with TestClient(app) as client:
        assert client.get("/v1/studies/\u00b2").status_code == 422  # "²".isdigit() is True
        assert client.get("/v1/studies/12").status_code == 404
        # a path parameter named like a LogRecord attribute (the asset's ``name``)
        assert client.get("/ui/static/dashboard.css").status_code == 200
        assert client.get("/ui/static/nothing.js").status_code == 404
    events = {r.getMessage(): r for r in caplog.records if r.name == "bbkb.access"}
    assert {"GET /ui/static/dashboard.css 200", "GET /ui/static/nothing.js 404"} <= set(events)
    assert events["GET /v1/studies/12 404"].study_id == 12
    assert any(m.startswith("GET /v1/studies/") and m.endswith(" 422") for m in events)


def test_access_log_names_the_owner_and_the_key_of_each_request(tmp_path, caplog):
    """Who deleted a study, or paused a dispatch: the access log names the owner and the key
    (its first characters, as `bbkb keys list` shows them; never the key), and its scope."""
    from service.api.app import create_app
    from service.auth import SHOWN, create_key
    from service.settings import Settings
    from service.store.database import transaction

    from .helpers import TestClient, create_study

    caplog.set_level(logging.INFO, logger="bbkb.access")
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", auth="keys",
                              data_dir=tmp_path))
    with TestClient(app) as client:
        with transaction(app.state.sessions) as session:
            owner, worker = create_key(session, "lab"), create_key(session, "lab", "worker")
        client.headers["Authorization"] = f"Bearer {owner}"
        sid = create_study(client)["id"]
        client.headers["Authorization"] = f"Bearer {worker}"
        assert client.delete(f"/v1/studies/{sid}").status_code == 403
        client.headers["Authorization"] = f"Bearer {owner}"
        assert client.delete(f"/v1/studies/{sid}").status_code == 204
        client.headers["Authorization"] = "Bearer bbkb_unknown"
        assert client.get("/v1/studies").status_code == 401
    events = [(r.getMessage(), getattr(r, "key", None), getattr(r, "scope", None))
              for r in caplog.records if r.name == "bbkb.access"]
    assert (f"DELETE /v1/studies/{sid} 403", worker[:SHOWN], "worker") in events
    assert (f"DELETE /v1/studies/{sid} 204", owner[:SHOWN], "owner") in events
    assert ("GET /v1/studies 401", None, None) in events  # no key known: none named
    deleted = next(r for r in caplog.records if r.getMessage().endswith(" 204"))
    assert deleted.owner_id >= 1 and owner not in str(deleted.__dict__)
