"""The RQ job: evaluate one trial and report its outcome through the client SDK.

A worker process needs only ``BBKB_URL`` (the API) and, with keys, ``BBKB_API_KEY``; Redis is
RQ's concern. While the objective runs, a heartbeat thread keeps the trial's lease alive. An
exception fails the trial with its text (retryable: the server retries it up to the study's
max attempts); a non-numeric or non-finite value fails it for good with the reason. The SDK
retries posting with backoff, so a result survives a server restart.
"""

from __future__ import annotations

import functools
import logging
import threading
import traceback
from typing import Any

from client import Client, ConflictError

from .objectives import resolve, run

log = logging.getLogger("bbkb.worker")


def _heartbeats(client: Client, payload: dict[str, Any], stop: threading.Event) -> None:
    study = client.study(payload["study_id"], fetch=False)
    interval = max(0.05, float(payload["lease_seconds"]) / 3)
    while not stop.wait(interval):
        try:
            study.heartbeat(payload["trial_id"], worker_id=payload["worker_id"])
        except ConflictError:
            return  # the lease was lost: the result is still posted (late results are accepted)
        except Exception:  # noqa: BLE001 - a missed heartbeat must not kill the evaluation
            log.warning("heartbeat for trial %s failed", payload["trial_id"], exc_info=True)


@functools.cache
def _client() -> Client:
    """One SDK client per worker process: its connections are reused from job to job."""
    return Client()


def evaluate_trial(payload: dict[str, Any]) -> float | None:
    """RQ entry point. ``payload``: study_id, trial_id, worker_id, candidate, vector,
    parameters, objective, lease_seconds."""
    client = _client()
    study = client.study(payload["study_id"], fetch=False)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeats, args=(client, payload, stop), daemon=True)
    beat.start()
    try:
        objective = resolve(payload["objective"])
        value = run(objective, payload["candidate"], payload["vector"],
                    payload["parameters"])
    except ValueError as exc:  # a bad objective spec or a bad value: retrying cannot help
        study.fail(payload["trial_id"], str(exc), retryable=False,
                   worker_id=payload["worker_id"])
        return None
    except Exception as exc:  # noqa: BLE001 - the objective's own failure
        reason = "".join(traceback.format_exception_only(exc)).strip()
        study.fail(payload["trial_id"], reason, retryable=True, worker_id=payload["worker_id"])
        return None
    finally:
        stop.set()
    try:
        study.tell(payload["trial_id"], value)
    except ConflictError:
        log.info("trial %s was completed by another attempt", payload["trial_id"])
    return value
