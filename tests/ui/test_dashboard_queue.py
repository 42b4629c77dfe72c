"""The workers' queue (GET /v1/queue) on the dashboard, in headless chromium against real servers,
a real Redis and real RQ workers: the line above the studies and, on a study page whose dispatch
runs, the hint when no worker listens or Redis does not answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy import update

from service.processes import RedisProcess
from service.store.database import make_engine, session_factory, transaction
from service.store.models import Study
from workers import runner

from .test_dashboard_browser import _server
from .ui_helpers import create_study, run_trials

#: A slow objective of the worker tests (BBKB_TEST_DELAY seconds a call): a dispatch of it keeps
#: running while the test looks.
SLOW = "tests.workers.objective_fns:slow"
ASYNC = {"strategy": "uniform", "mode": "async", "batch_size": 4, "seed": 0}
NO_WORKER = "no worker is listening on the queue: start bbkb worker"


@pytest.fixture
def queued(server_factory, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real Redis, a server (SQLite, no auth) dispatching to it, a REST client, and the
    worker processes the test spawns (stopped at the end, then the server and Redis)."""
    redis = RedisProcess().start()
    workers: list = []
    try:
        server = server_factory({"BBKB_DATABASE_URL": f"sqlite:///{tmp_path / 'bbkb.db'}",
                                 "BBKB_AUTH": "none", "BBKB_DATA_DIR": str(tmp_path),
                                 "BBKB_REDIS_URL": redis.url, "BBKB_REAPER_INTERVAL": "0.5"})
        with httpx2.Client(base_url=server.url, timeout=30) as http:
            yield {"redis": redis, "server": server, "http": http, "workers": workers}
    finally:
        runner.stop(workers, timeout=5)
        redis.stop()


def _dispatched(http: httpx2.Client, n: int = 200, parallelism: int = 3) -> int:
    """A study whose server-side dispatch of SLOW runs: its id."""
    sid = create_study(http, name="dispatched", engine=ASYNC, objective=SLOW,
                       parameter_names=["x0", "x1"])["id"]
    r = http.post(f"/v1/studies/{sid}/dispatch",
                  json={"n_evaluations": n, "parallelism": parallelism})
    assert r.status_code == 200, r.text
    return sid


def _queue_responses(page) -> list[int]:  # type: ignore[no-untyped-def]
    """The statuses of the page's GET /v1/queue answers, appended as they come."""
    seen: list[int] = []
    page.on("response", lambda r: seen.append(r.status) if r.url.endswith("/v1/queue") else None)
    return seen


def _wait_count(page, seen: list, n: int) -> None:  # type: ignore[no-untyped-def]
    """Until ``seen`` holds n items (20 s at most). A poll asks for the queue once and draws
    its answer before the next poll starts: at n >= 2 the first n - 1 answers are drawn."""
    for _ in range(400):
        if len(seen) >= n:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{len(seen)} answers of GET /v1/queue, not {n}")


def test_queued_jobs_without_a_worker_then_workers(queued, page):
    http = queued["http"]
    sid = _dispatched(http)
    page.goto(f"{http.base_url}/ui/?poll=300")
    page.wait_for_selector("#studies tbody tr")
    page.wait_for_function(  # (the server enqueues the dispatch's jobs as it goes)
        "t => document.getElementById('queue-text').textContent === t",
        arg="Workers: 0 \u00b7 jobs: 3 queued, 0 running, 0 failed \u2014 " + NO_WORKER)
    assert page.get_attribute("#queue", "data-redis") == "ok"
    assert page.is_hidden("#queue-workers-box")  # no worker to list
    assert page.is_visible("#queue-hint")

    page.goto(f"{http.base_url}/ui/studies/{sid}?poll=300")
    page.wait_for_selector("#dispatch[data-status=running]")
    page.wait_for_selector("#dispatch-hint[data-reason=no-worker]")
    assert page.text_content("#dispatch-hint") == NO_WORKER
    assert page.is_visible("#dispatch-hint")

    queued["workers"] += runner.spawn(queued["redis"].url, 2, env={
        "BBKB_URL": str(http.base_url), "BBKB_TEST_DELAY": "1.0"})
    page.wait_for_selector("#dispatch-hint", state="hidden", timeout=60_000)
    assert page.get_attribute("#dispatch", "data-status") == "running"  # still running

    page.goto(f"{http.base_url}/ui/?poll=300")
    page.wait_for_selector("#queue[data-workers='2']")
    text = page.text_content("#queue-text")
    assert text.startswith("Workers: 2 (") and "busy) \u00b7 jobs: " in text
    assert NO_WORKER not in text
    page.click("#queue-workers-summary")
    names = page.eval_on_selector_all("#queue-workers tbody tr",
                                      "rows => rows.map(r => r.cells[0].textContent)")
    assert sorted(names) == sorted(w["name"] for w in http.get("/v1/queue").json()["workers"])
    heartbeats = page.eval_on_selector_all("#queue-workers tbody tr",
                                           "rows => rows.map(r => r.cells[3].textContent)")
    assert all(h.endswith(" s ago") for h in heartbeats), heartbeats


def test_redis_stopped_shows_a_warning(queued, page):
    http = queued["http"]
    sid = _dispatched(http)
    page.goto(f"{http.base_url}/ui/?poll=300")
    page.wait_for_selector("#queue[data-redis=ok]")
    queued["redis"].stop()
    page.wait_for_selector("#queue[data-redis=unreachable]")
    assert page.text_content("#queue-text") == (
        "\u26a0 Redis unreachable: server-side dispatches cannot send trials to the workers")
    detail = page.text_content("#queue-detail")  # the server's reason, also the tooltip
    assert detail.startswith("(") and "Error" in detail
    assert page.get_attribute("#queue-text", "title") == detail[1:-1]
    assert page.is_hidden("#queue-workers-box")
    assert page.text_content("#studies tbody tr a") == "dispatched"  # the studies still show

    page.goto(f"{http.base_url}/ui/studies/{sid}?poll=300")
    page.wait_for_selector("#dispatch-hint[data-reason=unreachable]")
    assert page.text_content("#dispatch-hint") == (
        "Redis unreachable: no trials are sent until it answers")
    assert "Error" in page.get_attribute("#dispatch-hint", "title")


def test_without_redis_and_when_the_queue_cannot_be_had(server_factory, tmp_path, page):
    url, server = _server(server_factory, tmp_path, "none")
    with httpx2.Client(base_url=server.url, timeout=30) as http:
        sid = create_study(http, name="local", engine=ASYNC)["id"]
        run_trials(http, sid, 4)
    seen = _queue_responses(page)
    page.goto(f"{server.url}/ui/?poll=200")
    page.wait_for_selector("#queue[data-redis='not configured']")
    assert page.text_content("#queue-text") == "No Redis configured (server-side dispatch off)"
    assert page.text_content("#queue-detail") == "" and page.is_hidden("#queue-workers-box")

    # a study without a dispatch never asks for the queue
    page.goto(f"{server.url}/ui/studies/{sid}?poll=200")
    page.wait_for_selector("#plot-best path.series")
    seen.clear()
    with page.expect_response(lambda r: f"/v1/studies/{sid}/dispatch" in r.url):
        pass  # (asked at every 5th poll: at least 5 polls are done after it)
    assert seen == [] and page.is_hidden("#dispatch")

    engine = make_engine(url)  # a dispatch this server cannot send (as in test_dashboard_lab)
    try:
        with transaction(session_factory(engine)) as session:
            session.execute(update(Study).where(Study.id == sid).values(dispatch={
                "status": "running", "n_evaluations": 20, "parallelism": 4, "objective": SLOW,
                "job_timeout": 3600, "finished_before": 0}))
    finally:
        engine.dispose()
    page.wait_for_selector("#dispatch[data-status=running]")
    _wait_count(page, seen, 2)  # asked while the dispatch runs; "not configured": no hint
    assert seen[:2] == [200, 200] and page.is_hidden("#dispatch-hint")

    # a network error, then a server without the route: the rest of the page goes on
    page.route("**/v1/queue", lambda route: route.abort())
    page.goto(f"{server.url}/ui/?poll=200")
    page.wait_for_selector("#queue[data-redis=error]")
    assert page.text_content("#queue-text") == "Queue state unavailable"
    assert page.text_content("#studies tbody tr a") == "local"
    page.goto(f"{server.url}/ui/studies/{sid}?poll=200")
    page.wait_for_selector("#dispatch[data-status=running]")
    page.wait_for_selector("#plot-best path.series")
    assert page.is_hidden("#dispatch-hint") and page.is_hidden("#message")

    page.unroute("**/v1/queue")
    page.route("**/v1/queue", lambda route: route.fulfill(
        status=404, content_type="application/json", body='{"detail": "Not Found"}'))
    seen.clear()
    page.goto(f"{server.url}/ui/?poll=200")
    page.wait_for_selector("#studies tbody tr")
    with page.expect_response(lambda r: "/v1/summaries" in r.url):
        pass  # a later poll: the 404 was seen, and is not asked again
    with page.expect_response(lambda r: "/v1/summaries" in r.url):
        pass
    assert seen == [404] and page.is_hidden("#queue") and page.is_hidden("#message")
