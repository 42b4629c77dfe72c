"""Two server processes' dispatchers on one PostgreSQL database and one Redis, as in the compose
deployment (several uvicorn workers, several api replicas). Each "process" is an app with its
own engine cache and Dispatcher; their background threads are not started, so the passes run
in the order the test chooses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest
from fastapi.testclient import TestClient
from redis import Redis
from rq import Queue, SimpleWorker
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.results import Result
from rq.utils import utcformat
from sqlalchemy import text

from service import dispatch
from service.api.app import create_app
from service.dispatch import QUEUE
from service.processes import RedisProcess
from service.settings import Settings
from service.store.database import transaction
from service.store.models import utcnow


@pytest.fixture
def redis_url() -> Iterator[str]:
    server = RedisProcess().start()
    yield server.url
    server.stop()


@pytest.fixture
def servers(pg_database_url, redis_url, tmp_path):  # type: ignore[no-untyped-def]
    settings = Settings(database_url=pg_database_url, redis_url=redis_url, auth="none",
                        data_dir=tmp_path)
    a, b = create_app(settings), create_app(settings)
    client = TestClient(a)  # no `with`: the reaper and dispatcher threads stay off
    redis = Redis.from_url(redis_url)
    try:
        body = {"name": "two", "candidates": np.random.default_rng(0).random((50, 2)).tolist(),
                "objective": "function:branin", "engine": {"strategy": "bbkb", "seed": 0}}
        sid = client.post("/v1/studies", json=body).json()["id"]
        r = client.post(f"/v1/studies/{sid}/dispatch",
                        json={"n_evaluations": 6, "parallelism": 2})
        assert r.status_code == 200, r.text
        yield a, b, client, sid, Queue(QUEUE, connection=redis)
    finally:  # what the lifespan's end would do: close the engines' pooled connections
        client.close()
        redis.close()
        for app in (a, b):
            app.state.sessions.kw["bind"].dispose()
            if app.state.dispatcher is not None:
                app.state.dispatcher.redis.close()


def _sql(app, statement: str, **params):  # type: ignore[no-untyped-def]
    with transaction(app.state.sessions) as session:
        result = session.execute(text(statement), params)
        return result.all() if result.returns_rows else []


def _version(app, sid: int) -> int:  # type: ignore[no-untyped-def]
    return _sql(app, "SELECT version FROM studies WHERE id = :sid", sid=sid)[0][0]


def test_idle_passes_leave_the_study_alone_in_every_process(servers):
    a, b, client, sid, queue = servers
    assert a.state.dispatcher.top_up(sid) == 2  # parallelism 2
    version = _version(a, sid)
    for dispatcher in (b.state.dispatcher, a.state.dispatcher, b.state.dispatcher):
        assert dispatcher.top_up(sid) == 0
    assert _version(a, sid) == version  # no new version: no engine rebuild anywhere
    assert sid not in b.state.runtimes._cache  # b never loaded the engine
    assert queue.count == 2

    trial_id = _sql(a, "SELECT id FROM trials WHERE study_id = :sid ORDER BY id", sid=sid)[0][0]
    r = client.post(f"/v1/studies/{sid}/trials/{trial_id}/complete", json={"value": 1.0})
    assert r.status_code == 200, r.text
    assert b.state.dispatcher.top_up(sid) == 1  # a result came in: one slot is free again
    assert queue.count == 3


def test_repair_does_not_enqueue_a_trial_another_process_is_enqueuing(servers):
    a, b, _, sid, queue = servers
    handed = a.state.runtimes.mutate(sid, None, a.state.dispatcher._ask)  # committed, and
    assert len(handed) == 2 and queue.count == 0                           # not enqueued yet
    assert b.state.dispatcher.repair(sid) == 0  # too recent to be missing
    for payload in handed:  # process a goes on: enqueues after its commit
        a.state.dispatcher._enqueue(payload)
    assert queue.count == 2

    queue.connection.flushall()  # now the jobs are really lost, and the trials are older
    _sql(a, "UPDATE trials SET started_at = started_at - interval '1 minute'")
    assert b.state.dispatcher.repair(sid) == 2
    assert a.state.dispatcher.repair(sid) == 0  # b put them back: not enqueued twice
    repaired = sorted(queue.job_ids)  # each under a new name (-r<hex>), taken under the lock
    assert [name.rpartition("-")[0] for name in repaired] == sorted(
        p["job_id"].rpartition("-")[0] for p in handed)  # bbkb-<study>-<trial>-<attempt>
    assert all(name.rpartition("-")[2].startswith("r") for name in repaired)


def test_a_job_whose_worker_died_before_taking_its_trial_is_repaired(servers, monkeypatch):
    """A worker killed between taking a job from the queue and its first heartbeat (the API was
    down, say) leaves the job "started" in RQ for an hour and its trial without a lease, which
    the reaper never sees: the dispatch stalled. A job a process has seen started for
    UNTAKEN_SECONDS with its trial not taken is now lost; one it has just seen started is not.
    Timed on the server's clock: RQ's started_at is the worker's, which may be far off."""
    monkeypatch.setattr(dispatch, "UNTAKEN_SECONDS", 0.5)
    a, b, _, sid, queue = servers
    assert a.state.dispatcher.top_up(sid) == 2
    _sql(a, "UPDATE trials SET started_at = started_at - interval '2 minutes'")

    registry = queue.started_job_registry

    def take(job: str, started: timedelta) -> None:  # what RQ holds of a job a worker started
        queue.remove(job)
        queue.connection.hset(Job.key_for(job), mapping={
            "status": "started", "started_at": utcformat(utcnow() + started)})
        queue.connection.zadd(registry.key, {f"{job}:execution-1": time.time() + 3600})

    dead, slow = sorted(queue.job_ids)
    take(dead, timedelta(days=1))  # its worker's clock a day ahead
    assert b.state.dispatcher.repair(sid) == 0  # just seen: its heartbeat may be on its way
    time.sleep(0.6)
    take(slow, -timedelta(hours=1))  # its worker's clock an hour behind: just taken, though
    assert queue.count == 0
    assert b.state.dispatcher.repair(sid) == 1
    (repaired,) = queue.job_ids
    assert repaired.rpartition("-")[0] == dead.rpartition("-")[0]  # bbkb-<study>-<trial>-<n>
    assert repaired.rpartition("-")[2].startswith("r")
    workers = {w for (w,) in _sql(a, "SELECT worker_id FROM trials WHERE study_id = :sid",
                                  sid=sid)}
    assert workers == {"rq-" + repaired, "rq-" + slow}  # the slow worker's trial is its own
    assert a.state.dispatcher.repair(sid) == 0  # a has not seen the slow one started for long
    # GET /v1/queue counts RQ's started jobs: the dead worker's is no longer among them
    assert [e.decode() for e in queue.connection.zrange(registry.key, 0, -1)] == [
        f"{slow}:execution-1"]
    assert b.state.dispatcher.queue_state()["started"] == 1


def _start(queue: Queue) -> tuple[SimpleWorker, Job, Execution]:
    """What an RQ worker does with the next job up to calling its function, whose first
    heartbeat then does not land (its worker killed, or slow)."""
    job, _ = Queue.dequeue_any([queue], None, connection=queue.connection)
    worker = SimpleWorker([queue], connection=queue.connection)
    execution = worker.prepare_execution(job)
    worker.prepare_job_execution(job, remove_from_intermediate_queue=True)
    return worker, job, execution


def _finish(worker: SimpleWorker, job: Job, execution: Execution) -> None:
    """What the RQ worker does when the job's function returns (its heartbeat found the trial
    renamed: it skipped it)."""
    (queue,) = worker.queues
    worker.handle_execution_ended(job, queue, 60)
    worker.handle_job_success(job, queue, queue.started_job_registry, execution)


def _repair_untaken(servers, monkeypatch) -> tuple[SimpleWorker, Job, Execution]:  # type: ignore[no-untyped-def]
    """A job a worker started whose trial it did not take, repaired."""
    monkeypatch.setattr(dispatch, "UNTAKEN_SECONDS", 0.5)
    a, b, _, sid, queue = servers
    assert a.state.dispatcher.top_up(sid) == 2
    _sql(a, "UPDATE trials SET started_at = started_at - interval '2 minutes'")
    started = _start(queue)
    assert b.state.dispatcher.repair(sid) == 0
    time.sleep(0.6)
    return started


def test_a_repaired_job_fails_with_why_and_its_worker_if_alive_finishes_it(servers,
                                                                           monkeypatch):
    """The job of a worker gone before taking its trial said "started" until Redis expired it
    (RQ's clean-up, which would have failed it as abandoned, finds jobs by the started-job
    registry it has left): it fails, saying why, as the repair re-enqueues its trial. A worker
    alive after all (its heartbeat found the trial renamed) then finishes it as any job."""
    a, b, _, sid, queue = servers
    worker, job, execution = _repair_untaken(servers, monkeypatch)
    assert b.state.dispatcher.repair(sid) == 1
    (repaired,) = [j for j in queue.job_ids  # bbkb-<study>-<trial>-<attempt>-r<hex>
                   if j.rpartition("-")[0] == job.id.rpartition("-")[0]]
    ended = Job.fetch(job.id, connection=queue.connection)
    assert ended.get_status() == JobStatus.FAILED
    result = ended.latest_result()
    assert result is not None and result.type == Result.Type.FAILED
    assert result.exc_string == (
        "its worker took no trial in 0.5 s (gone before its first heartbeat landed): the "
        f"server re-enqueued trial {job.args[0]['trial_id']} as job {repaired}")
    assert queue.failed_job_registry.get_job_ids() == [job.id]
    state = b.state.dispatcher.queue_state()
    assert (state["queued"], state["started"], state["failed"]) == (2, 0, 1)

    _finish(worker, job, execution)
    ended = Job.fetch(job.id, connection=queue.connection)
    assert ended.get_status() == JobStatus.FINISHED
    assert ended.latest_result().type == Result.Type.SUCCESSFUL
    assert queue.finished_job_registry.get_job_ids() == [job.id]
    assert queue.started_job_registry.get_job_count(cleanup=False) == 0
    workers = {w for (w,) in _sql(a, "SELECT worker_id FROM trials WHERE study_id = :sid",
                                  sid=sid)}
    assert "rq-" + repaired in workers and "rq-" + job.id not in workers


def test_a_repaired_job_its_worker_finished_meanwhile_stays_finished(servers, monkeypatch):
    """The worker's heartbeat lands just after the repair renamed its trial: its job skips the
    trial and finishes before the repair ends it. Its own outcome stands."""
    _, b, _, sid, queue = servers
    worker, job, execution = _repair_untaken(servers, monkeypatch)
    enqueue = dispatch.Dispatcher._enqueue

    def enqueue_then_finish(self, payload):  # type: ignore[no-untyped-def]
        enqueue(self, payload)
        _finish(worker, job, execution)

    monkeypatch.setattr(dispatch.Dispatcher, "_enqueue", enqueue_then_finish)
    assert b.state.dispatcher.repair(sid) == 1
    ended = Job.fetch(job.id, connection=queue.connection)
    assert ended.get_status() == JobStatus.FINISHED
    assert ended.latest_result().type == Result.Type.SUCCESSFUL
    assert queue.failed_job_registry.get_job_count(cleanup=False) == 0
    assert queue.started_job_registry.get_job_count(cleanup=False) == 0


def test_an_exhausted_deterministic_dispatch_waits_quietly_then_ends(servers):
    """Every candidate handed out, all in flight, slots free: passes in either process must not
    bump the version (one whose engine was stale used to: it asked, was refused, and wrote),
    and the last result ends the dispatch."""
    a, b, client, _, _ = servers
    body = {"name": "once", "candidates": np.random.default_rng(1).random((3, 2)).tolist(),
            "objective": "function:branin", "engine": {"strategy": "bbkb", "seed": 0,
                                                        "mode": "async", "deterministic": True}}
    sid = client.post("/v1/studies", json=body).json()["id"]
    r = client.post(f"/v1/studies/{sid}/dispatch", json={"n_evaluations": 10, "parallelism": 4})
    assert r.status_code == 200, r.text
    assert a.state.dispatcher.top_up(sid) == 3  # every candidate, one slot still free
    version = _version(a, sid)
    for dispatcher in (b.state.dispatcher, a.state.dispatcher, b.state.dispatcher):
        assert dispatcher.top_up(sid) == 0
    assert _version(a, sid) == version
    for (trial_id,) in _sql(a, "SELECT id FROM trials WHERE study_id = :sid", sid=sid):
        assert client.post(f"/v1/studies/{sid}/trials/{trial_id}/complete",
                           json={"value": 2.0}).status_code == 200
    assert b.state.dispatcher.top_up(sid) == 0
    assert client.get(f"/v1/studies/{sid}/dispatch").json()["status"] == "done"
    candidates = _sql(a, "SELECT candidate FROM trials WHERE study_id = :sid", sid=sid)
    assert sorted(c for (c,) in candidates) == [0, 1, 2]
