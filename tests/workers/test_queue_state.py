"""GET /v1/queue: the workers' queue as Redis holds it, with real Redis, server and workers."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from client import Client
from workers import runner

from ..shared_http import http
from .helpers import dispatch_study


def _queue(url: str) -> dict:
    r = http.get(f"{url}/v1/queue")
    assert r.status_code == 200, r.text
    return r.json()


def _until(url: str, condition, timeout: float = 60.0) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _queue(url)
        if condition(state):
            return state
        time.sleep(0.2)
    raise AssertionError(f"the queue never reached the condition: {state}")


def test_the_queue_shows_waiting_jobs_live_workers_and_a_lost_redis(system):
    url = system["server"].url
    assert _queue(url) == {"redis": "ok", "detail": None, "queued": 0, "started": 0,
                           "failed": 0, "workers": []}
    sid = dispatch_study(url, np.random.default_rng(0).random((50, 2)),
                         "tests.workers.objective_fns:slow")
    r = http.post(f"{url}/v1/studies/{sid}/dispatch",
                    json={"n_evaluations": 6, "parallelism": 3})
    assert r.status_code == 200, r.text
    # no worker yet: the dispatch's jobs wait in the queue
    assert _until(url, lambda s: s["queued"] == 3)["workers"] == []
    system["workers"] += runner.spawn(system["redis"].url, 2,
                                      env={"BBKB_URL": url, "BBKB_TEST_DELAY": "1.0"})
    busy = _until(url, lambda s: len(s["workers"]) == 2 and s["started"] >= 1)
    assert {w["state"] for w in busy["workers"]} <= {"starting", "idle", "busy", "started"}
    assert any(w["current_job"] for w in busy["workers"])
    assert all(w["last_heartbeat"] for w in busy["workers"])
    done = _until(url, lambda s: s["queued"] == 0 and s["started"] == 0, timeout=120)
    assert len(done["workers"]) == 2 and done["failed"] == 0
    with Client(url) as client:  # the SDK reads the same
        seen = client.queue()
    assert seen.redis == "ok" and sorted(w.name for w in seen.workers) == sorted(
        w["name"] for w in done["workers"])
    shown = _bbkb_queue(url)
    assert shown.returncode == 0, shown.stderr
    assert "redis: ok" in shown.stdout and "workers: 2" in shown.stdout
    assert all(w["name"] in shown.stdout for w in done["workers"])
    system["redis"].stop()
    lost = _queue(url)
    assert lost["redis"] == "unreachable" and "Error" in lost["detail"]
    assert lost["workers"] == [] and lost["queued"] == 0
    shown = _bbkb_queue(url)
    assert shown.returncode == 1 and shown.stdout.startswith("redis: unreachable (")


def _bbkb_queue(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", "queue", "--url", url],
                          capture_output=True, text=True, timeout=60)
