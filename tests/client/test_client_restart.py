"""A worker's result survives a server crash: the tell is retried until the server is back."""

from __future__ import annotations

import threading
import time

import numpy as np

from client import Client
from service.processes import ServerProcess


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
