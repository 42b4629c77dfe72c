"""The RQ job: evaluate one trial and report its outcome through the client SDK.

A worker process needs only ``BBKB_URL`` (the API) and, with keys, ``BBKB_API_KEY`` (or the file
named by ``BBKB_API_KEY_FILE``); Redis is RQ's concern. While the objective runs, a heartbeat
thread keeps the trial's lease alive. An exception (or ``sys.exit``) fails the trial with its text
(retryable: the server retries it up to the study's max attempts); a value that is not a finite
number within +-1e100 fails it for good with the reason, and so does one the server refuses (422)
and an objective the worker refuses (a module its own ``BBKB_OBJECTIVE_MODULES`` does not allow:
it is never imported).
The SDK retries every request with backoff for ``BBKB_WORKER_RETRY_SECONDS`` (default 60: 1 to 2
minutes with the jitter), so a result survives a server restart.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
import traceback
from typing import Any

from client import Client, ConflictError, ValidationError
from client.client import MAX_DELAY

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


#: The worker's retry budget in seconds when ``BBKB_WORKER_RETRY_SECONDS`` is unset.
RETRY_SECONDS = 60.0
_BACKOFF = 0.5


def retry_policy(seconds: float) -> tuple[int, float]:
    """(retries, backoff) for the SDK whose waits add up to at least ``seconds`` even with the
    shortest jitter: the SDK waits ``min(backoff * 2**attempt, MAX_DELAY)`` times U(0.5, 1)."""
    retries, total = 0, 0.0
    while total < seconds:
        total += min(_BACKOFF * 2**retries, MAX_DELAY) / 2
        retries += 1
    return retries, _BACKOFF


@functools.cache
def _client() -> Client:
    """One SDK client per worker process: its connections are reused from job to job. Its
    retries ride out a server restart of ``BBKB_WORKER_RETRY_SECONDS`` (60 s to 2 min)."""
    seconds = float(os.environ.get("BBKB_WORKER_RETRY_SECONDS") or RETRY_SECONDS)
    retries, backoff = retry_policy(seconds)
    return Client(retries=retries, backoff=backoff)


def check_api() -> None:
    """Check the API and the credentials once, before taking jobs: one authenticated GET with
    the retry budget. Raises AuthenticationError (401) or ServerUnavailable."""
    _client().request("GET", "/v1/studies", params={"limit": 1})


#: Set by the worker process on SIGTERM (warm shutdown): finish the evaluation in progress and
#: take no next trial.
stopping = threading.Event()
#: A job hands its slot back to the queue after this many chained evaluations or seconds, so that
#: other studies' jobs waiting in the queue get workers too.
CHAIN_EVALUATIONS, CHAIN_SECONDS = 1000, 60.0


def evaluate_trial(payload: dict[str, Any]) -> int:
    """RQ entry point: evaluate the payload's trial (study_id, trial_id, worker_id, candidate,
    vector, parameters, objective, lease_seconds, job_timeout), then, in async dispatch, the
    trials the server hands back with each result: one job keeps a parallelism slot busy with no
    Redis round trip and no new job per evaluation. Returns the number of trials evaluated."""
    client, started, done = _client(), time.monotonic(), 0
    job: dict[str, Any] | None = payload
    while job is not None:
        value = _evaluate(client, job)
        done += 1
        if value is None:
            return done
        chain = (not stopping.is_set() and done < CHAIN_EVALUATIONS
                 and time.monotonic() - started < CHAIN_SECONDS)
        job = _report(client, job, value, chain)
        if job is not None:
            _restart_timeout(int(job.get("job_timeout", 0)))
    return done


def _evaluate(client: Client, payload: dict[str, Any]) -> float | None:
    """The objective's value, or None after failing the trial with the reason."""
    study = client.study(payload["study_id"], fetch=False)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeats, args=(client, payload, stop), daemon=True)
    beat.start()
    try:
        objective = resolve(payload["objective"])
        return run(objective, payload["candidate"], payload["vector"], payload["parameters"])
    except ValueError as exc:  # a bad objective spec, a module this worker's
        # BBKB_OBJECTIVE_MODULES does not allow (never imported) or a bad value: for good
        study.fail(payload["trial_id"], _clip(str(exc)), retryable=False,
                   worker_id=payload["worker_id"])
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the objective's failure or timeout
        if isinstance(exc, SystemExit) and stopping.is_set():
            raise  # RQ's cold shutdown (a second SIGTERM): stop now, the lease runs out
        reason = _clip("".join(traceback.format_exception_only(exc)).strip())
        study.fail(payload["trial_id"], reason, retryable=True, worker_id=payload["worker_id"])
    finally:
        stop.set()
    return None


def _clip(reason: str, limit: int = 2000) -> str:
    """A failure reason short enough for the API (it refuses more than 10,000 characters)."""
    return reason if len(reason) <= limit else reason[:limit - 15] + " ... (clipped)"


def _report(client: Client, payload: dict[str, Any], value: float,
            chain: bool) -> dict[str, Any] | None:
    """Post the value; the next trial to evaluate, if the server hands one out."""
    study = client.study(payload["study_id"], fetch=False)
    try:
        answer = study.complete_dispatched(payload["trial_id"], value, payload["worker_id"],
                                           next=chain)
    except ConflictError:
        log.info("trial %s was completed by another attempt", payload["trial_id"])
        return None
    except ValidationError as exc:  # e.g. 422 "value must lie within +-1e+100": retry cannot help
        try:
            study.fail(payload["trial_id"], f"the server refused the value {value!r}: "
                       f"{exc.detail}", retryable=False, worker_id=payload["worker_id"])
        except ConflictError:
            log.info("trial %s was completed by another attempt", payload["trial_id"])
        return None
    return None if answer.next is None else answer.next.model_dump()


def _restart_timeout(seconds: int) -> None:
    """Give a chained evaluation the full job timeout: re-arm RQ's SIGALRM death penalty (the
    job runs in the worker's main thread); its JobTimeoutException fails the trial as above."""
    if seconds > 0 and threading.current_thread() is threading.main_thread():
        signal.alarm(seconds)
