"""The RQ job: evaluate one trial and report its outcome through the client SDK.

A worker process needs only ``BBKB_URL`` (the API) and, with keys, ``BBKB_API_KEY`` (or the file
named by ``BBKB_API_KEY_FILE``); Redis is RQ's concern. A job taken from the queue first takes
its trial's lease with a heartbeat (a queued trial has none: it cannot expire while its job
waits for a worker) and skips the trial if it is no longer the job's; while the objective runs,
a heartbeat thread keeps the lease alive. An exception (or ``sys.exit``) fails the trial with
its text (retryable: the server retries it up to the study's max attempts); a value that is not
a finite number within +-1e100 fails it for good with the reason, and so does one the server
refuses (422). An objective this worker cannot run (a module its own ``BBKB_OBJECTIVE_MODULES``
does not allow, never imported, one it cannot import, a function the module lacks or imported
from elsewhere, a spec it cannot parse) is a fault of the setup, not of the trial: the worker
pauses the study's dispatch and releases the trial (back to the pool, the attempt not counted).
A key the API refuses mid-run stops the worker (exit 1), as at start.
The SDK retries every request with backoff for ``BBKB_WORKER_RETRY_SECONDS`` (default 60: 1 to 2
minutes with the jitter), so a result survives a server restart.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import signal
import socket
import threading
import time
import traceback
from typing import Any

from client import (
    Account,
    AuthenticationError,
    Client,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from client.client import MAX_DELAY

from .objectives import BadValue, Refused, resolve, run

log = logging.getLogger("bbkb.worker")


def _heartbeats(client: Client, payload: dict[str, Any], stop: threading.Event) -> None:
    study = client.study(payload["study_id"], fetch=False)
    interval = max(0.05, float(payload["lease_seconds"]) / 3)
    while not stop.wait(interval):
        try:
            study.heartbeat(payload["trial_id"], worker_id=payload["worker_id"])
        except ConflictError:
            return  # the lease was lost: the result is still posted (late results are accepted)
        except NotFoundError:
            return  # the study (or trial) was deleted: no lease left to keep
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


#: The longest retry budget accepted (a day): far longer, the SDK's retries never end.
MAX_RETRY_SECONDS = 86400.0


def retry_seconds() -> float:
    """``BBKB_WORKER_RETRY_SECONDS``, or RETRY_SECONDS if unset; ValueError naming it unless a
    number of seconds in (0, MAX_RETRY_SECONDS] (0, -5 or nan gave no retries at all, so that
    results no longer survived a server restart; inf an OverflowError)."""
    text = os.environ.get("BBKB_WORKER_RETRY_SECONDS", "").strip()
    if not text:
        return RETRY_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_RETRY_SECONDS:
        raise ValueError(f"BBKB_WORKER_RETRY_SECONDS must be a number of seconds in (0, "
                         f"{MAX_RETRY_SECONDS:g}], got {text!r}")
    return seconds


@functools.cache
def _client() -> Client:
    """One SDK client per worker process: its connections are reused from job to job. Its
    retries ride out a server restart of ``BBKB_WORKER_RETRY_SECONDS`` (60 s to 2 min)."""
    retries, backoff = retry_policy(retry_seconds())
    return Client(retries=retries, backoff=backoff)


def check_api() -> Account | None:
    """Check the API and the credentials once, before taking jobs: one authenticated GET with
    the retry budget; the key's account (owner, scope), None from a server without ``/v1/me``.
    Raises AuthenticationError (401) or ServerUnavailable."""
    try:
        return _client().account()
    except NotFoundError:  # a server from before GET /v1/me
        _client().request("GET", "/v1/studies", params={"limit": 1})
        return None


#: Set by the worker process on SIGTERM (warm shutdown): finish the evaluation in progress and
#: take no next trial.
stopping = threading.Event()
#: Why the worker stopped by itself (the API refused its key mid-run): its exit message.
fatal: list[str] = []
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
    try:
        while job is not None:
            value = _evaluate(client, job, queued=done == 0)
            done += 1
            if value is None:
                return done
            chain = (not stopping.is_set() and done < CHAIN_EVALUATIONS
                     and time.monotonic() - started < CHAIN_SECONDS)
            job = _report(client, job, value, chain)
            if job is not None:
                _restart_timeout(int(job.get("job_timeout", 3600)))
    except AuthenticationError as exc:  # the key was revoked: every job would be lost alike
        _stop_worker(f"the API refused the worker's key mid-run ({exc.detail}); trial "
                     f"{job['trial_id'] if job else '?'} is left to its lease or, not taken "
                     "yet, to the dispatcher")
    return done


def _stop_worker(reason: str) -> None:
    """Stop this worker warm (the job ends now) and have it exit 1 with ``reason``."""
    log.error("stopping: %s", reason)
    fatal.append(reason)
    os.kill(os.getpid(), signal.SIGTERM)  # RQ's warm stop: no next job


def _evaluate(client: Client, payload: dict[str, Any], queued: bool = False) -> float | None:
    """The objective's value, or None after failing the trial with the reason (or skipping it:
    ``queued``, a job from the queue, first takes the trial's lease, and skips a trial that is
    no longer the job's: completed, given back, or repaired into another job)."""
    study = client.study(payload["study_id"], fetch=False)
    trial_id, worker_id = payload["trial_id"], payload["worker_id"]
    if queued:
        try:
            study.heartbeat(trial_id, worker_id=worker_id)
        except ConflictError as exc:
            log.info("trial %s skipped: %s", trial_id, exc.detail)
            return None
        except NotFoundError as exc:  # deleted, or hidden from this key: the API cannot tell
            log.warning("trial %s skipped: %s (deleted, or this worker's key, BBKB_API_KEY, "
                        "belongs to another owner than the study's)", trial_id, exc.detail)
            return None
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeats, args=(client, payload, stop), daemon=True)
    beat.start()
    try:
        try:
            objective = resolve(payload["objective"])
        except Refused as exc:  # the setup's fault, the same for every trial: not this one's
            _refused(study, payload, str(exc))
            return None
        try:
            return run(objective, payload["candidate"], payload["vector"], payload["parameters"])
        finally:  # the timeout is the objective's: the outcome's post may ride out an outage
            _restart_timeout(0)
    except BadValue as exc:  # NaN, a string, beyond +-1e100: a retry would return it again
        _fail(study, payload, str(exc), retryable=False)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the objective's failure or timeout
        if isinstance(exc, SystemExit) and stopping.is_set():
            raise  # RQ's cold shutdown (a second SIGTERM): stop now, the lease runs out
        _fail(study, payload, _exception_text(exc), retryable=True)
    finally:
        stop.set()
    return None


def _exception_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(exc)).strip()


def _fail(study: Any, payload: dict[str, Any], reason: str, *, retryable: bool,
          release: bool = False) -> None:
    try:
        study.fail(payload["trial_id"], _clip(reason), retryable=retryable,
                   worker_id=payload["worker_id"], release=release)
    except (ConflictError, NotFoundError) as exc:  # completed or re-issued; study deleted
        log.info("trial %s not failed: %s", payload["trial_id"], exc.detail)


def _refused(study: Any, payload: dict[str, Any], reason: str) -> None:
    """Pause the study's dispatch of this objective (so that this worker takes no more of its
    jobs, and the operator sees it; a newer dispatch of another objective is left alone), then
    release the trial: back to the pool, the attempt not counted, for a worker that can run
    it or a dispatch of the corrected objective."""
    log.error("trial %s: %s; pausing the dispatch of study %s", payload["trial_id"], reason,
              payload["study_id"])
    try:
        study.pause_dispatch(objective=payload["objective"])
    except ConflictError:
        pass  # a newer dispatch of another objective, or none (a manual run of the job)
    _fail(study, payload, f"worker {socket.gethostname()} pid {os.getpid()}: {reason} (the "
          "dispatch is paused: resume it once every worker can run the objective, or "
          "dispatch again with the corrected --objective)", retryable=True, release=True)


def _clip(reason: str, limit: int = 2000) -> str:
    """A failure reason the API takes: at most ``limit`` characters (it refuses more than
    10,000), NUL bytes and undecodable bytes (lone surrogates) escaped."""
    reason = reason.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode()
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
    except NotFoundError:
        log.info("trial %s: its study was deleted", payload["trial_id"])
        return None
    except ValidationError as exc:  # e.g. 422 "value must lie within +-1e+100": retry cannot help
        _fail(study, payload, f"the server refused the value {value!r}: {exc.detail}",
              retryable=False)
        return None
    return None if answer.next is None else answer.next.model_dump()


def _restart_timeout(seconds: int) -> None:
    """Give a chained evaluation the full job timeout: re-arm RQ's SIGALRM death penalty (the
    job runs in the worker's main thread); its JobTimeoutException fails the trial as above.
    0 disarms it (the objective returned: posting its outcome is not timed)."""
    if seconds >= 0 and threading.current_thread() is threading.main_thread():
        signal.alarm(seconds)
