"""The ``bbkb`` command: demo, serve, worker, study, queue, bench, migrate, keys create /
ensure / list / revoke."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import logs

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

    from .settings import Settings


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    if args.no_auth:
        os.environ["BBKB_AUTH"] = "none"  # read by every worker process's Settings()
    os.environ.setdefault("BBKB_LOG_FORMAT", "text")  # every app process configures its logs
    os.environ["BBKB_LOG_LEVEL"] = args.log_level
    port = args.port if args.port is not None else _from_env("BBKB_PORT", "8000", _port)
    workers = args.workers if args.workers is not None else _from_env(
        "BBKB_API_WORKERS", "1", _processes)
    _check_database()
    _check_port(args.host, port)
    # the supervisor of several processes logs as they do (uvicorn's own format otherwise)
    logs.configure(os.environ["BBKB_LOG_FORMAT"], args.log_level)  # type: ignore[arg-type]
    if workers > 1:  # its processes stop if it dies, even of a SIGKILL (api.app)
        os.environ["BBKB_SUPERVISOR_PID"] = str(os.getpid())
    uvicorn.run("service.api.app:create_app", factory=True, host=args.host, port=port,
                workers=workers, log_level=args.log_level, access_log=False, log_config=None)
    return 0


def _from_env(variable: str, default: str, parse):  # type: ignore[no-untyped-def]
    """A flag's default from ``variable``, parsed as the flag is; a bad value exits in one line
    naming the variable (as argparse's default it named a flag nobody gave, in a usage error)."""
    try:
        return parse(os.environ.get(variable) or default)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"bbkb serve: {variable}: {exc}") from None


def _check_port(host: str, port: int) -> None:
    """Refuse here, in one line, a port another process listens on: uvicorn logs 'Application
    startup complete', then an ERROR line, and exits 3."""
    import errno
    import socket

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            hint = {errno.EADDRINUSE: "another server? choose --port",
                    errno.EACCES: "a port below 1024 needs privileges: choose --port"}.get(
                exc.errno, "check --host")
            raise SystemExit(f"bbkb serve: cannot listen on {host}:{port}: {exc.strerror or exc}"
                             f" ({hint})") from None


def _check_database() -> None:
    """Refuse here, in one line, what the application factory would refuse inside uvicorn with
    a traceback (and, with several processes, again at each respawn, for good): a SQLite
    directory that cannot be created, a database that cannot be reached, a schema newer than
    this code, and with BBKB_AUTO_MIGRATE off a stale one; with it on, upgrade it here, once."""
    from .settings import Settings
    from .store.database import make_data_dir, sqlite_path
    from .store.migrate import ensure_schema

    settings = Settings()
    path = sqlite_path(str(settings.database_url))
    if path is not None:
        make_data_dir(path.parent)  # OSError: one line (_run)
    if not settings.auto_migrate and path is not None and not path.exists():
        # connecting would create it, only to refuse it
        raise SystemExit(f"bbkb serve: no database at {path}: run `bbkb migrate` first (or set"
                         " BBKB_AUTO_MIGRATE=true)")
    with _engine(settings) as engine:
        ensure_schema(engine, auto_upgrade=settings.auto_migrate)  # errors: one line (_run)


@contextlib.contextmanager
def _engine(settings: Settings | None = None) -> Iterator[Engine]:
    """The settings' database engine, disposed of afterwards (an in-process call, as in the
    tests, would otherwise keep its pooled connections)."""
    from .settings import Settings
    from .store.database import make_engine

    settings = settings or Settings()
    engine = make_engine(str(settings.database_url), settings.database_busy_seconds,
                         settings.database_pool_size, settings.database_max_overflow)
    try:
        yield engine
    finally:
        engine.dispose()


def _migrate(_: argparse.Namespace) -> int:
    from .store.migrate import head, upgrade

    with _engine() as engine:
        before = upgrade(engine)  # read under the migration lock: another migrate's is seen
        where = engine.url.render_as_string(hide_password=True)
    state = f"{head()}, already current" if before == head() else \
        f"{before or 'empty'} -> {head()}"
    print(f"database schema: {state} ({where})")
    return 0


def _keys_database(command: str, create: bool | None) -> tuple[str, bool]:
    """The database the keys commands use, as printed (a SQLite file's absolute path, else the
    URL without its password), and whether it is a new SQLite file. SystemExit, in one line,
    where a SQLite file does not exist yet and connecting would create it: a key written into
    a new, empty database is one the server refuses (run in another directory, ``./bbkb-data``
    is another database). It is created only for ``keys create`` / ``ensure`` given
    ``--create`` (``create``) or a database named explicitly (``--data-dir``,
    ``BBKB_DATA_DIR``, ``BBKB_DATABASE_URL``); ``list`` and ``revoke`` (``create`` None)
    never create one."""
    from sqlalchemy.engine import make_url

    from .settings import Settings
    from .store.database import sqlite_path

    url = str(Settings().database_url)
    path = sqlite_path(url)
    if path is None:
        return make_url(url).render_as_string(hide_password=True), False
    path = path.absolute()
    explicit = bool(os.environ.get("BBKB_DATABASE_URL") or os.environ.get("BBKB_DATA_DIR"))
    if path.exists() or (create is not None and (create or explicit)):
        return str(path), not path.exists()
    where = ("run it where the server runs, or name the server's database with --data-dir, "
             "BBKB_DATA_DIR or BBKB_DATABASE_URL")
    if create is not None:
        where += "; --create makes a new database here"
    raise SystemExit(f"bbkb keys {command}: no database at {path}: {where}")


@contextlib.contextmanager
def _keys_session(command: str, create: bool | None = None) -> Iterator[Session]:
    """One transaction on the settings' database, its schema made or checked first (the keys
    commands); see :func:`_keys_database` for when it may be created."""
    from .store.database import session_factory, transaction
    from .store.migrate import ensure_schema

    _keys_database(command, create)
    with _engine() as engine:
        ensure_schema(engine)
        with transaction(session_factory(engine)) as session:
            yield session


#: How keys' times are shown (UTC).
_TIME = "%Y-%m-%d %H:%M:%S"


def _keys_create(args: argparse.Namespace) -> int:
    from .auth import create_key

    database, new = _keys_database("create", args.create)
    with _keys_session("create", args.create) as session:
        token = create_key(session, args.owner, args.scope)
    print(token)
    print(f"(API key for owner {args.owner!r}, scope {args.scope}, in "
          f"{'the new' if new else 'the'} database {database}: shown once, store it now)",
          file=sys.stderr)
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    from .auth import list_keys

    with _keys_session("list") as session:
        keys = list_keys(session, args.owner)
    print(f"{'KEY':<15} {'OWNER':<20} {'SCOPE':<7} {'CREATED':<20} REVOKED")
    for key in keys:
        revoked = key.revoked_at.strftime(_TIME) if key.revoked_at else "-"
        print(f"{key.prefix + '...':<15} {key.owner:<20} {key.scope:<7} "
              f"{key.created_at.strftime(_TIME):<20} {revoked}")
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    from .auth import revoke_key

    try:
        with _keys_session("revoke") as session:
            key, now = revoke_key(session, args.key)
    except LookupError as exc:
        raise SystemExit(f"bbkb keys revoke: {exc.args[0]}") from None
    print(f"{'revoked' if now else 'already revoked'}: {key.prefix}... of owner {key.owner!r} "
          f"(at {key.revoked_at:{_TIME}} UTC)", file=sys.stderr)
    return 0


def _keys_ensure(args: argparse.Namespace) -> int:
    """Keep a valid key of ``--owner`` and ``--scope`` in ``--file`` (mode 0600): the one already
    there if the database knows it for that owner and scope, else a new one. Compose's worker
    key; rerunning is a no-op."""
    from .auth import SHOWN, authenticate, create_key, owner_id_for
    from .errors import Unauthorized

    if not args.file:
        raise SystemExit("bbkb keys ensure: --file or BBKB_API_KEY_FILE is required")
    path = Path(args.file)
    held = path.read_text().strip() if path.is_file() else ""
    database, _ = _keys_database("ensure", args.create)
    replaced = None  # a valid key of another owner or scope, which the new one replaces
    with _keys_session("ensure", args.create) as session:
        try:
            caller = authenticate(session, f"Bearer {held}")
            valid = (caller.owner, caller.scope) == (owner_id_for(session, args.owner),
                                                     args.scope)
            replaced = None if valid else held[:SHOWN]
        except Unauthorized:  # no key in the file, or one the database does not know
            valid = False
        if not valid:
            held = create_key(session, args.owner, args.scope)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)  # a new file: created with mode 0600, never wider
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as out:
                out.write(held + "\n")
        else:
            path.chmod(0o600)
    state = "kept" if valid else "created"
    print(f"API key of owner {args.owner!r} (scope {args.scope}) in {path}: {state} "
          f"(database {database})", file=sys.stderr)
    if replaced:  # it may be in use elsewhere: not revoked here
        print(f"the key it replaces, {replaced}..., is still valid: bbkb keys revoke "
              f"{replaced} if nothing else uses it", file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    return demo_main(args.rest)  # the demo parses its own options (bbkb demo --help)


def _owner(text: str) -> str:
    """An owner name (argparse type): not blank, at most 200 characters, printable."""
    if not text.strip() or len(text) > 200 or not text.isprintable():
        raise argparse.ArgumentTypeError(f"an owner name is 1 to 200 printable characters, not "
                                         f"only spaces; got {text!r:.60}")
    return text


def _port(text: str) -> int:
    """A TCP port number (argparse type; 0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is between 0 and 65535, got {port}")
    return port


def _processes(text: str) -> int:
    """A number of processes, at least 1 (argparse type)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"at least 1 process, got {count}")
    return count


#: The keys commands' --create.
CREATE_HELP = ("create the database if there is none (default: only where --data-dir, "
               "BBKB_DATA_DIR or BBKB_DATABASE_URL names it; else ./bbkb-data must hold the "
               "server's)")
#: The keys commands' --scope (service.auth.SCOPES, named here so that --help imports no SQL).
SCOPE_OPTION = {"choices": ("owner", "worker"), "default": "owner",
                "help": "what the key may do: owner (default) everything; worker only read "
                        "studies and ask for, heartbeat and report trials (for the machines "
                        "that evaluate)"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bbkb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    data_dir = argparse.ArgumentParser(add_help=False)  # the database's commands share it
    data_dir.add_argument("--data-dir", help="where the default SQLite database lives "
                          "(default: BBKB_DATA_DIR, else ./bbkb-data; BBKB_DATABASE_URL wins)")
    serve = sub.add_parser("serve", parents=[data_dir],
                           help="run the API server (settings from BBKB_* variables)",
                           description="Run the API server (uvicorn; OpenAPI at /docs). Its "
                                       "settings are BBKB_* variables (README, Deployment); "
                                       "the options below override theirs.")
    env = os.environ.get
    serve.add_argument("--host", default=env("BBKB_HOST", "127.0.0.1"),
                       help="default: BBKB_HOST, else 127.0.0.1")
    serve.add_argument("--port", type=_port, help="default: BBKB_PORT, else 8000")
    serve.add_argument("--workers", type=_processes,
                       help="uvicorn worker processes (default: BBKB_API_WORKERS, else 1)")
    serve.add_argument("--no-auth", action="store_true",
                       help="single-user mode: no API keys (BBKB_AUTH=none)")
    serve.add_argument("--log-level", type=str.lower, choices=logs.LEVELS,
                       default=env("BBKB_LOG_LEVEL", "info"),
                       help="default: BBKB_LOG_LEVEL, else info; BBKB_LOG_FORMAT=json for "
                            "JSON lines")
    serve.set_defaults(run=_serve)

    sub.add_parser("worker", add_help=False,  # listed here, run by main before any parsing
                   help="run RQ worker processes that evaluate trials")

    demo = sub.add_parser("demo", add_help=False,
                          help="the whole system end to end (Redis, server, workers)")
    demo.set_defaults(run=_demo)

    migrate = sub.add_parser("migrate", parents=[data_dir],
                             help="upgrade the database schema to this version")
    migrate.set_defaults(run=_migrate)

    from . import bench

    bench.add_parser(sub)

    from . import study_cli  # the SDK's imports: not paid by `bbkb worker`

    study_cli.add_parser(sub)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", parents=[data_dir],
                                 help="create an API key (prints it once)")
    create.add_argument("--owner", required=True, type=_owner, help="owner name (created if new)")
    create.add_argument("--scope", **SCOPE_OPTION)
    create.add_argument("--create", action="store_true", help=CREATE_HELP)
    create.set_defaults(run=_keys_create)
    ensure = keys_sub.add_parser(
        "ensure", parents=[data_dir],
        help="keep a valid key of OWNER in FILE (creates one if needed; idempotent)")
    ensure.add_argument("--owner", required=True, type=_owner, help="owner name (created if new)")
    ensure.add_argument("--file", default=env("BBKB_API_KEY_FILE"),
                        help="where the key is kept, mode 0600 (default: BBKB_API_KEY_FILE)")
    ensure.add_argument("--scope", **SCOPE_OPTION)
    ensure.add_argument("--create", action="store_true", help=CREATE_HELP)
    ensure.set_defaults(run=_keys_ensure)
    listing = keys_sub.add_parser("list", parents=[data_dir],
                                  help="every key: its first characters, owner, dates")
    listing.add_argument("--owner", type=_owner, help="only this owner's keys")
    listing.set_defaults(run=_keys_list)
    revoke = keys_sub.add_parser(
        "revoke", parents=[data_dir],
        help="revoke a key (refused from the server's next request on)")
    revoke.add_argument("key", help="the whole key, or its first characters as keys list shows")
    revoke.set_defaults(run=_keys_revoke)
    return parser


def _quiet_stdout() -> None:
    """After a closed pipe on stdout (``bbkb study list | head``): send what is still buffered
    to /dev/null, so that the flush at exit prints nothing either (Python's recipe for
    SIGPIPE, https://docs.python.org/3/library/signal.html#note-on-sigpipe)."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (captured, replaced)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """``bbkb ...``: the exit code; errors end it with one line on stderr (SystemExit)."""
    try:  # the workers' too, not only serve's Settings
        logs.configure_variables(os.environ.get("BBKB_LOG_FORMAT") or "text",
                                 os.environ.get("BBKB_LOG_LEVEL", "info"))
    except ValueError as exc:
        raise SystemExit(f"bbkb: {exc}") from None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["worker"]:  # its own parser; not the 0.8 s of imports of the others
        from workers.runner import main as worker_main

        return worker_main(argv[1:])  # the runner parses its own options (bbkb worker --help)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        args.rest = rest
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command in ("study", "queue"):
            from . import study_cli

            code = study_cli.run(args)
        else:
            code = _run(args)
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a socket or another pipe, not the reader of our output
        _quiet_stdout()  # the reader went away: end quietly, exit 1 like Python does
        return 1
    return code


def _run(args: argparse.Namespace) -> int:
    """A command other than ``study``; a bad ``BBKB_*`` setting or a database that cannot be
    reached ends it with one line, not a traceback."""
    import pydantic
    from sqlalchemy.exc import OperationalError

    from client.errors import invalid_argument

    if getattr(args, "data_dir", None):  # serve, migrate, keys: as BBKB_DATA_DIR
        os.environ["BBKB_DATA_DIR"] = args.data_dir
    try:
        return int(args.run(args))
    except pydantic.ValidationError as exc:
        if exc.title != "Settings":
            raise  # not a setting (the demo's client reading an answer, say)
        error = invalid_argument(exc)
        name = "BBKB_" + (error.field or "").replace(".", "_").upper()
        detail = error.detail
        if error.field in ("database_url", "redis_url"):  # their passwords are not echoed
            detail = re.sub(r"(://[^:/\s]*:).*@", r"\1***@", detail.rsplit("; got ", 1)[0])
            detail = re.sub(r"(password=)[^&\s'\"]*", r"\1***", detail, flags=re.I)
        if error.field == "metrics_token":  # a secret
            detail = detail.rsplit("; got ", 1)[0].replace(" items", " characters")
        raise SystemExit(f"bbkb {args.command}: {name}: {detail}") from None
    except OperationalError as exc:
        from .store.database import error_line

        raise SystemExit(f"bbkb {args.command}: cannot use the database: "
                         f"{error_line(exc)}") from None
    except RuntimeError as exc:  # a SchemaError (store.migrate, imported only if it ran)
        migrate = sys.modules.get("service.store.migrate")
        if migrate is None or not isinstance(exc, migrate.SchemaError):
            raise
        raise SystemExit(f"bbkb {args.command}: {exc}") from None
    except OSError as exc:
        if exc.filename is None:
            raise  # not a file or directory of ours (BrokenPipeError: main's)
        raise SystemExit(f"bbkb {args.command}: {exc.filename}: {exc.strerror}") from None


def _stdout_closed() -> bool:
    """Whether stdout's reader has gone: poll reports an error (a Linux pipe) or a hang-up (a
    socket, a BSD pipe) on it."""
    import select

    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (captured, replaced)
        return False
    if not hasattr(select, "poll"):  # Windows
        return True
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    gone = select.POLLERR | select.POLLHUP
    return any(event & gone for _, event in poller.poll(0))


if __name__ == "__main__":
    raise SystemExit(main())
