"""``bbkb worker``: N RQ worker processes on the ``bbkb`` queue.

Each process is an RQ ``SimpleWorker`` (RQ owns the loop, job timeouts and signals): jobs run in
the worker process itself rather than in a fork per job, so imports, loaded data sets and HTTP
connections are paid once per process, not once per evaluation (a fork per job cost ~1 s here).
A job past its timeout is interrupted by RQ's alarm-based death penalty. SIGTERM or Ctrl-C lets
the job in progress finish its evaluation (a warm shutdown: it takes no next trial, and is
waited for); a second one stops it (a cold shutdown). With ``-n N`` the parent takes SIGTERM
and SIGINT (Ctrl-C) for all: its worker processes ignore SIGINT, so Ctrl-C at a terminal
reaches them once, as the parent's SIGTERM, a second Ctrl-C or SIGTERM as a second, and a third
as a SIGKILL (for a job stuck where no signal handler runs). SIGHUP (the terminal closed) is
taken as SIGTERM. A SIGINT, SIGTERM or SIGHUP inherited as ignored (SIGINT in a background job
of a script, SIGHUP under nohup) stays ignored by the process that inherited it (a ``-n N``
parent's worker processes still take its SIGTERM), and a worker process whose
parent is gone (killed with SIGKILL) stops by itself: warm, or cold if a warm stop was under
way. A worker needs only ``BBKB_REDIS_URL`` (or ``--redis-url``) and
``BBKB_URL`` (+ ``BBKB_API_KEY`` or ``BBKB_API_KEY_FILE``). At start it pings Redis and makes
one authenticated request to the API, and exits with code 1 and a one-line message if either
fails (a wrong key, an API still down after the retry budget). With ``-n N`` the parent exits
with code 1, naming the process, as soon as one of its worker processes exits abnormally (the
others are stopped warm). A worker rides out a Redis outage; a ``--burst`` worker (exit 0 once
the queue is empty) that loses Redis exits 1 with one line. A worker that Redis forgot (it restarted
without persistence) registers itself again at its next heartbeat, so the worker lists see it again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redis import Redis

    from client import Account

QUEUE = "bbkb"
log = logging.getLogger("bbkb.worker")  # workers.job's: one logger for the worker's own lines
#: The signals a ``-n N`` parent (and ``bbkb demo``) takes for its worker processes: SIGHUP
#: (the terminal closed) as SIGTERM.
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class StartupError(Exception):
    """The worker cannot start (Redis or the API unreachable, a bad URL or a refused API key)
    or go on (the API refused its key mid-run; a burst worker lost Redis)."""


def work(redis_url: str, burst: bool = False, parent: int | None = None) -> None:
    """Run one RQ worker in this process until stopped (or the queue is empty, with burst);
    StartupError if Redis or the API cannot be used. With ``parent`` (the pid of a ``-n N``
    parent) SIGINT is left to that parent, each of its SIGTERMs counts (RQ's one-second window
    for a duplicate signal is for signals that reach a worker twice, from a pool and from the
    terminal), and the worker stops once the parent is gone."""
    from redis.exceptions import RedisError
    from rq import Queue, SimpleWorker, worker_registration
    from rq.exceptions import StopRequested

    import service.problems  # noqa: F401 - the built-in objectives' numpy/scipy, paid at start
    import workers.job  # noqa: F401 - import once, before the first job

    ignored = [signal.SIGINT, signal.SIGHUP] if parent is not None else [  # the parent's
        signum for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGTERM stops
        if signal.getsignal(signum) is signal.SIG_IGN]

    class Worker(SimpleWorker):
        announced = False  # "worker ready", once per process (a new Worker after an outage)

        def _install_signal_handlers(self) -> None:
            super()._install_signal_handlers()
            signal.signal(signal.SIGHUP, self.request_stop)  # a closed terminal: as SIGTERM
            _ignore(ignored)
            if not Worker.announced:  # ready once a SIGTERM is a warm stop (before: killed)
                Worker.announced = True
                try:
                    _ready(redis_url, account)
                except StopRequested:  # a stop as it logged, outside work()'s try: the
                    self._stop_requested = True  # loop's first check ends it (teardown runs)

        def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
            """RQ's heartbeat, and the worker listed again if Redis lost its data (restarted
            without persistence): RQ lists a worker only as it starts (``register_birth``), and
            a worker that rides out the restart (its dequeue retries) went on unlisted."""
            if pipeline is not None or self.birth_date is None:  # (a job's step; the birth)
                super().heartbeat(timeout, pipeline)
                return
            timeout = timeout or self.worker_ttl + 60
            with self.connection.pipeline() as beat:  # one round trip, as RQ's three were
                super().heartbeat(timeout, beat)
                rq_commands = len(beat)
                beat.hexists(self.key, "birth")
                beat.sismember(worker_registration.REDIS_WORKER_KEYS, self.key)
                for name in self.queue_names():
                    beat.sismember(worker_registration.WORKERS_BY_QUEUE_KEY % name, self.key)
                listed = beat.execute()[rq_commands:]
            if all(listed):
                return
            self.log.warning("Worker %s: Redis lost its entry (restarted empty?); "
                             "registered again", self.name)
            with self.connection.pipeline() as again:  # register_birth's, the birth kept
                again.hset(self.key, mapping={**self.serialize(), "state": self._state})
                worker_registration.register(self, again)
                again.expire(self.key, timeout)
                again.execute()

        def request_stop(self, signum, frame):  # type: ignore[no-untyped-def]
            workers.job.stopping.set()  # the job in progress takes no next trial
            try:
                super().request_stop(signum, frame)  # (an idle worker raises StopRequested)
            finally:
                _ignore(ignored)  # RQ has just installed its cold-shutdown handler for both

        def request_force_stop(self, signum, frame):  # type: ignore[no-untyped-def]
            if parent is None:
                super().request_force_stop(signum, frame)
                return
            self.log.warning("Worker %s: cold shut down", self.name)
            raise SystemExit  # a SimpleWorker has no work horse to take down

    if parent is not None:
        from service.processes import watch_parent

        watch_parent(parent)  # stop once it dies, even of a SIGKILL (a warm stop)
    logging.getLogger("rq.worker").addFilter(_one_line_redis_errors)
    _stops_survive_logging()
    _check_modules()
    connection = _redis(redis_url)
    account = _check_api()
    try:
        while True:
            worker = None
            try:  # (a new Worker asks Redis its name and address)
                worker = Worker([Queue(QUEUE, connection=connection)], connection=connection)
                worker.work(burst=burst, logging_level="WARNING")  # (RQ rides out outages)
            except RedisError as exc:
                if workers.job.stopping.is_set():
                    break  # Redis gone while stopping: RQ could not deregister the worker
                    # (its entry expires). The results went to the API, so nothing is lost
                    # (bbkb demo stops Redis on Ctrl-C too)
                if burst:  # exit 1: not the empty queue's 0
                    raise StartupError(f"lost Redis before the queue was drained ({exc}); "
                                       "jobs may be left in it") from exc
            if burst or workers.job.stopping.is_set() or workers.job.fatal:
                break
            # RQ quit on an error it does not ride out, e.g. Redis lost while it recorded the
            # end of a job (whose results went to the API) or while it started (before its
            # signal handlers): a new worker, once Redis answers again
            if not _redis_back(worker, connection):
                break
    except StopRequested:  # _redis_back's handler, before the next worker installed RQ's
        pass
    if workers.job.fatal:  # a job stopped the worker: the API refused its key mid-run
        raise StartupError(workers.job.fatal[0])


def _one_line_redis_errors(record: logging.LogRecord) -> bool:
    """RQ logs a lost Redis ("found an unhandled exception, quitting") with its traceback; the
    worker rides it out or exits with one line, so the log says the error in one line too."""
    from redis.exceptions import RedisError

    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, RedisError):
        said = f"{type(error).__name__}: {error}".replace("%", "%%")  # msg is %-formatted
        record.msg, record.exc_info, record.exc_text = f"{record.msg} ({said})", None, None
    return True


def _stops_survive_logging() -> None:
    """RQ stops an idle worker by raising StopRequested from its SIGTERM handler, wherever the
    main thread is. Inside a log handler's emit (RQ's line on a failed Redis reconnection, which
    the sender of the SIGTERM may have just read), logging caught it (``handleError``) and the
    worker went on retrying Redis: the SIGTERM was lost (a CI run under load). The handlers
    RQ's records reach (its own, set up here as its ``work()`` would, or those of the
    loggers above) re-raise it instead."""
    from rq.exceptions import StopRequested
    from rq.logutils import setup_loghandlers

    def reraise_stops(handler: logging.Handler) -> None:
        report = handler.handleError
        if getattr(report, "reraises_stops", False):
            return

        def handle_error(record: logging.LogRecord) -> None:
            if isinstance(sys.exc_info()[1], StopRequested):
                raise  # the StopRequested being handled
            report(record)

        handle_error.reraises_stops = True  # type: ignore[attr-defined]
        handler.handleError = handle_error  # type: ignore[method-assign]

    for name in ("rq.worker", "rq.job"):
        setup_loghandlers("WARNING", name=name)
        logger: logging.Logger | None = logging.getLogger(name)
        while logger is not None:
            for handler in logger.handlers:
                reraise_stops(handler)
            logger = logger.parent if logger.propagate else None


def _discard(worker: Any) -> None:
    """Stop the thread of a worker whose teardown failed (its unsubscribe never ran): it would
    go on retrying its channel, every 2 s, next to the new worker's."""
    thread = getattr(worker, "pubsub_thread", None)
    if thread is not None:
        thread.stop()
        with contextlib.suppress(Exception):  # Redis may still be down
            worker.pubsub.close()


def _redis_back(worker: Any, connection: Redis, poll: float = 2.0) -> bool:
    """After ``worker`` quit on an error (None: it could not be created): wait until Redis
    answers (True) or the worker is asked to stop (False). Waits at least ``poll`` seconds: an
    error that is not Redis's does not make a busy loop. The stop signals (those not ignored)
    stop the wait, and the next worker's start, whatever handlers RQ left: none if it quit
    while it started, and a SIGTERM then killed the worker (a CI run). Once stopping, further
    signals are ignored: nothing is left to stop cold."""
    from redis.exceptions import RedisError
    from rq.exceptions import StopRequested

    import workers.job

    handled = [signum for signum in HANDLED if signal.getsignal(signum) is not signal.SIG_IGN]

    def stop(signum: int, frame: object) -> None:
        _ignore(handled)
        workers.job.stopping.set()
        raise StopRequested

    try:
        for signum in handled:  # until the next worker's own (its start-up included)
            signal.signal(signum, stop)
        if worker is not None:
            worker.log.warning("Worker %s: quit on an error; a new worker starts once Redis "
                               "answers", worker.name)
            _discard(worker)
        else:
            log.warning("RQ's worker could not start; a new one starts once Redis answers")
        while not workers.job.stopping.is_set():
            time.sleep(poll)
            try:
                connection.ping()
                return True
            except RedisError:
                continue
    except StopRequested:  # ours, or RQ's (an idle worker's) before ours was installed: both
        pass  # set workers.job.stopping
    return False


def _ignore(signums: Sequence[int]) -> None:
    for signum in signums:
        signal.signal(signum, signal.SIG_IGN)


def _check_modules() -> None:
    """BBKB_OBJECTIVE_MODULES parses (StartupError if not: every import-path trial would fail)."""
    from service.objectives import modules_from_env

    try:
        modules_from_env()
    except ValueError as exc:
        raise StartupError(str(exc)) from exc


def _redis(url: str) -> Redis:
    """A connection to Redis, pinged once (StartupError if the URL is bad or Redis is down)."""
    from redis import Redis
    from redis.exceptions import RedisError

    try:
        connection = Redis.from_url(url)
        connection.ping()
    except (ValueError, RedisError) as exc:  # the URL is not printed: it may hold a password
        raise StartupError(f"Redis (--redis-url / BBKB_REDIS_URL) unusable: {exc}") from exc
    return connection


def _check_api() -> Account | None:
    """The API answers an authenticated request with the worker's key (StartupError if not):
    its account (None from a server without GET /v1/me)."""
    import workers.job
    from client import AuthenticationError, BBKBError

    try:
        url = workers.job._client().url  # the SDK client (TLS, connection pool) before any job
        return workers.job.check_api()
    except AuthenticationError as exc:
        raise StartupError(f"the API at {url} refused the worker's key (BBKB_API_KEY or "
                           f"BBKB_API_KEY_FILE): {exc}") from exc
    except (BBKBError, ValueError) as exc:  # ServerUnavailable, a bad BBKB_URL or key file
        raise StartupError(f"the API (BBKB_URL) is unusable: {exc}") from exc


def _ready(redis_url: str, account: Account | None) -> None:
    """Log (info) that this worker process is ready: the queue, Redis and API it serves,
    their passwords masked (the only sign of life at the default level until a job fails),
    and whose key it holds; a warning if that is an owner key, where a worker key would do."""
    import workers.job

    client = workers.job._client()
    log.info("worker ready", extra={
        "queue": QUEUE, "redis": masked_url(redis_url), "api": masked_url(client.url),
        "pid": os.getpid(),
        **({"owner": account.owner, "scope": account.scope} if account else {})})
    if account is not None and client.api_key and account.scope == "owner":
        log.warning(f"this worker holds an owner key of {account.owner!r}, which may create, "
                    "pause, delete and dispatch studies; a worker key is enough: bbkb keys "
                    f"create --owner {account.owner} --scope worker")


def masked_url(url: str) -> str:
    """``url`` with the password of its user part (``user:PASSWORD@``; a user part without a
    colon, all of it) and of a ``password=`` query parameter as ``***``."""
    url = re.sub(r"^([a-z][a-z0-9+.-]*://)([^/?#]*)@",
                 lambda m: m.group(1) + (m.group(2).split(":", 1)[0] + ":***"
                                         if ":" in m.group(2) else "***") + "@",
                 url, flags=re.I)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url, flags=re.I)


def configure_logs(environ: dict[str, str] | None = None) -> None:
    """A process started as ``python -m workers.runner`` (:func:`spawn`'s) logs as ``bbkb``
    does when BBKB_LOG_FORMAT is set (``bbkb worker -n N`` sets it for its processes; unset,
    logging is left as it is, as the server does). ValueError naming the variable if bad."""
    from service import logs

    environ = dict(os.environ) if environ is None else environ
    if environ.get("BBKB_LOG_FORMAT"):
        logs.configure_variables(environ["BBKB_LOG_FORMAT"],
                                 environ.get("BBKB_LOG_LEVEL") or "info")


def spawn(redis_url: str, processes: int, env: dict[str, str] | None = None,
          burst: bool = False, children: list[subprocess.Popen[bytes]] | None = None
          ) -> list[subprocess.Popen[bytes]]:
    """Start ``processes`` worker processes, children of this one, appended to ``children``
    (returned; a new list by default) as each starts: a Ctrl-C meanwhile loses none. They
    ignore SIGINT (the caller stops them with SIGTERM, :func:`stop`) and stop if this process
    dies. SIGINT and SIGHUP are blocked while they start, until they ignore them (``__main__``),
    so a Ctrl-C or a hangup then does not end one. The Redis URL goes in their environment, not
    their command line, which any local user can read (``ps``), password and all."""
    cmd = [sys.executable, "-m", "workers.runner", "--parent", str(os.getpid())]
    if burst:
        cmd.append("--burst")
    children = [] if children is None else children
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP})
    try:
        for _ in range(processes):
            children.append(subprocess.Popen(
                cmd, env={**os.environ, **(env or {}), "BBKB_REDIS_URL": redis_url},
                stdin=subprocess.DEVNULL))
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return children


def stop(children: Sequence[subprocess.Popen[bytes]], timeout: float | None = 15.0) -> None:
    """SIGTERM to the running children (a warm shutdown), SIGKILL to those still running
    ``timeout`` seconds later (one deadline for all; None: wait for them)."""
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = None if timeout is None else time.monotonic() + timeout
    for child in children:
        try:
            child.wait(timeout=None if deadline is None else max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def on_signal(children: Sequence[subprocess.Popen[bytes]], stopping: threading.Event
              ) -> Callable[..., None]:
    """The parent's SIGTERM and SIGINT handler. The first signal only sets ``stopping``
    (supervise then stops the children: waiting on them inside a handler can deadlock); the
    next one passes a SIGTERM on to the running children at once (RQ's cold shutdown), and any
    after it a SIGKILL (a job stuck in C code or blocking I/O never sees a Python signal
    handler). With ``stopping`` already set, the first signal is a cold shutdown."""
    forwarded: list[int] = []

    def handler(*_: object) -> None:
        if not stopping.is_set():
            stopping.set()
            return
        signum = signal.SIGKILL if forwarded else signal.SIGTERM
        forwarded.append(signum)
        for child in children:
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signum)

    return handler


def supervise(children: Sequence[subprocess.Popen[bytes]], poll: float = 0.2,
              stopping: threading.Event | None = None, burst: bool = False) -> int:
    """Wait for the children: 0 once all exited with 0; on a child's abnormal exit (any exit
    but a ``burst`` worker's code 0: the queue emptied), say which, stop the others and
    return 1. Once ``stopping`` is set (by :func:`on_signal`), stop them
    all and return 0: how they end is then not a failure. Stopped warm, they are waited for
    as long as their evaluations take (each bounded by its job timeout); a second signal to
    the parent stops them at once."""
    while True:
        if stopping is not None and stopping.is_set():
            stop(children, timeout=None)
            return 0
        for number, child in enumerate(children, 1):
            code = child.poll()
            if code is not None and (code or not burst) \
                    and not (stopping is not None and stopping.is_set()):
                how = (f"was killed by {signal.Signals(-code).name}" if code < 0
                       else f"exited with code {code}")
                print(f"bbkb worker: worker process {number} of {len(children)} (pid "
                      f"{child.pid}) {how}; stopping the others", file=sys.stderr)
                stop(children, timeout=None)
                return 1
        if all(child.poll() is not None for child in children):
            return 0
        time.sleep(poll)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="bbkb worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis-url", default=os.environ.get("BBKB_REDIS_URL"),
                        help="default: BBKB_REDIS_URL")
    parser.add_argument("--processes", "-n", type=int, default=1,
                        help="worker processes (default: 1)")
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    parser.add_argument("--parent", type=int, help=argparse.SUPPRESS)  # set by spawn()
    args = parser.parse_args(argv)
    if not args.redis_url:
        parser.error("give --redis-url or set BBKB_REDIS_URL")
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, got {args.processes}")
    import workers.job

    try:
        workers.job.retry_seconds()
    except ValueError as exc:
        print(f"bbkb worker: {exc}", file=sys.stderr)
        return 1
    if args.processes == 1:
        try:
            work(args.redis_url, burst=args.burst, parent=args.parent)
        except StartupError as exc:
            print(f"bbkb worker: {exc}", file=sys.stderr)
            return 1
        return 0
    return run_children(args.redis_url, args.processes, burst=args.burst)


def run_children(redis_url: str, processes: int, burst: bool = False) -> int:
    """``bbkb worker -n N``: start the worker processes and supervise them (see the module's
    docstring for the signals). They are started one by one into the list the signal handler
    sees, and stopped whatever ends the loop."""
    children: list[subprocess.Popen[bytes]] = []
    log_env = {"BBKB_LOG_FORMAT": os.environ.get("BBKB_LOG_FORMAT") or "text"}  # as bbkb's
    stopping = threading.Event()  # a child still in its start-up checks dies of the SIGTERM
    handler = on_signal(children, stopping)
    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # SIGINT of `cmd &`, nohup's SIGHUP
            signal.signal(signum, handler)
    try:
        for _ in range(processes):
            if stopping.is_set():
                break
            spawn(redis_url, 1, burst=burst, children=children, env=log_env)
        return supervise(children, stopping=stopping, burst=burst)
    finally:
        stop(children)


if __name__ == "__main__":
    if "--parent" in sys.argv:  # a child of spawn(): Ctrl-C and hangups are its parent's
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # even if the parent inherited SIG_IGN
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGHUP})  # spawn()
    try:
        configure_logs()
    except ValueError as error:
        raise SystemExit(f"bbkb worker: {error}") from None
    raise SystemExit(main())
