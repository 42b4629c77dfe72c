"""Server crashes: a worker's tell is retried until the server is back, and a wait for a
dispatch rides the outage out."""

from __future__ import annotations

import threading
import time

import numpy as np

from client import Client
from service.processes import RedisProcess, ServerProcess


def test_tell_survives_a_server_restart(tmp_path):
    env = {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none"}
    first = ServerProcess(env).start()
    second = ServerProcess(env, port=first.port)
    restarted = threading.Thread(target=lambda: (time.sleep(0.5), second.start()))
    try:
        with Client(first.url, retries=10, backoff=0.1) as sdk:
            study = sdk.create_study("restart", candidates=np.eye(4),
                                     engine={"strategy": "uniform"})
            (trial,) = study.ask("w").trials
            first.kill()  # SIGKILL: the server is gone while the worker evaluates
            restarted.start()
            began = time.monotonic()
            done = study.tell(trial.id, 0.5, worker_id="w")
            waited = time.monotonic() - began
            restarted.join()
            assert done.status == "completed" and done.value == 0.5
            assert waited > 0.4  # the tell was retried until the new server answered
            info = study.info
            assert info.counts["completed"] == 1 and info.best.id == trial.id
    finally:
        first.kill()
        second.stop()


def test_wait_rides_out_a_server_restart(tmp_path):
    """wait() gave up with ServerUnavailable after the client's own retries (about 5 s by
    default) when the server restarted under it; it now rides out the outage as optimize()
    does. No worker runs: the dispatch stays running until paused on the new server."""
    redis = RedisProcess().start()
    env = {"BBKB_DATA_DIR": str(tmp_path), "BBKB_AUTH": "none", "BBKB_REDIS_URL": redis.url}
    first = ServerProcess(env).start()
    second = ServerProcess(env, port=first.port)

    def restart_and_pause() -> None:
        time.sleep(0.5)
        second.start()
        with Client(second.url) as other:
            other.study("wait").pause_dispatch()  # ends the wait

    restarted = threading.Thread(target=restart_and_pause)
    try:
        with Client(first.url, retries=1, backoff=0.05) as sdk:
            study = sdk.create_study("wait", candidates=np.random.default_rng(0).random((20, 2)),
                                     objective="function:branin")
            assert study.dispatch(4, parallelism=2).status == "running"
            first.kill()  # SIGKILL: the wait starts with the server gone
            restarted.start()
            status = study.wait(progress=False, poll=0.05)
            restarted.join()
            assert (status.status, status.n_evaluations) == ("paused", 4)
    finally:
        first.kill()
        if restarted.ident is not None:
            restarted.join()  # even if wait gave up: no server left running
        second.stop()
        redis.stop()


def test_a_wait_with_a_timeout_gives_up_on_a_down_server_at_the_timeout():
    """The outage ride-out of wait() ignored its timeout: with the server down, wait(timeout=1)
    raised only after max_outage (120 s by default). Now ServerUnavailable at the timeout;
    here max_outage is an hour, and the wait must end long before it."""
    import socket

    from client.errors import ServerUnavailable

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    outcome: list[BaseException] = []

    def wait() -> None:
        with Client(url, retries=1, backoff=0.05) as sdk:
            try:
                sdk.study(1, fetch=False).wait(progress=False, timeout=0.5, max_outage=3600)
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                outcome.append(exc)

    waiting = threading.Thread(target=wait, daemon=True)
    waiting.start()
    waiting.join(timeout=120)  # a bound on a hang, not a timing assertion
    assert not waiting.is_alive(), "wait() went on past its timeout while the server was down"
    assert len(outcome) == 1 and isinstance(outcome[0], ServerUnavailable)
