"""``bbkb study create | list | show | best | export | ask | results | dispatch | wait | pause |
resume | delete``: studies from the shell, through the SDK; ``bbkb queue``: the workers' queue.

The server is reached like the SDK does: ``--url`` / ``BBKB_URL`` and ``--api-key`` /
``BBKB_API_KEY``. A study is named by its id or its name (an all-digit name works too when no
study has that id). Errors (the server's, invalid arguments, unreadable files) print one line
``error: ...`` and exit 1; an unreachable server exits 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from client import Client
from client.errors import (
    APIError,
    BBKBError,
    ConflictError,
    InvalidArgument,
    NotFoundError,
    invalid_argument,
)
from client.study import Study

from . import sheet_cli

if TYPE_CHECKING:
    import numpy as np

    from service.api.schemas import TrialStatus


def _engine_option(text: str) -> tuple[str, Any]:
    """``key=value``, the value read as JSON when it parses (numbers, booleans, objects)."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(raw)
    except json.JSONDecodeError:
        return key, raw


def _json_argument(text: str) -> Any:
    """Inline JSON, or @path / a path to a JSON file."""
    path = Path(text[1:] if text.startswith("@") else text)
    if text.startswith("@") or (path.suffix == ".json" and path.exists()):
        try:
            text = path.read_text()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def read_candidates(path: Path) -> tuple[np.ndarray, list[str] | None]:
    """A candidate matrix from .npy, or from .csv with an optional header row of parameter
    names; ValueError unless it is a non-empty 2-D matrix of finite numbers."""
    import numpy as np

    if path.suffix == ".npy":
        with path.open("rb") as handle:  # else np.load tries it as a pickle, and says so
            if handle.read(6) != b"\x93NUMPY":
                raise ValueError(f"{path}: not a .npy file (no NumPy header); save it with "
                                 "numpy.save, or give a .csv")
        return _checked(np.load(path, allow_pickle=False), None), None
    with path.open(newline="", encoding="utf-8-sig") as handle:
        header = next(csv.reader(handle, skipinitialspace=True), [])
    if not header:
        raise ValueError("the file is empty (expected rows of numbers, after an optional "
                         "header row of parameter names)")
    try:
        [float(cell) for cell in header]
        names, skip = None, 0
    except ValueError:
        names, skip = [cell.strip() for cell in header], 1
        _check_names(names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "input contained no data": refused below
        try:
            matrix = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2,
                                encoding="utf-8-sig", quotechar='"')
        except ValueError:
            _check_rows(path, names)
            raise
    if names is not None and matrix.size and matrix.shape[1] != len(names):
        raise ValueError(f"the header names {len(names)} columns, the rows have "
                         f"{matrix.shape[1]}")
    return _checked(matrix, names), names


def _check_rows(path: Path, names: list[str] | None) -> None:
    """ValueError naming the first data line whose number of columns differs from the header's
    (``names``), or from the first data line's without one, or the first cell that is not a
    number (row and column as :func:`_checked` counts them: from 1, data rows only; numpy's
    own message counts rows from 0); else nothing."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, skipinitialspace=True)
        if names is not None:
            next(reader)
        width, where = (len(names), "the header") if names is not None else (0, "")
        data_row = 0
        for row in reader:
            if not "".join(row).strip() or row[0].startswith("#"):
                continue  # blank lines and comments, as numpy.loadtxt skips them
            data_row += 1
            if not width:
                width, where = len(row), f"line {reader.line_num}"
            elif len(row) != width:
                plural = "" if len(row) == 1 else "s"
                raise ValueError(f"line {reader.line_num} has {len(row)} column{plural}, "
                                 f"expected {width} as in {where}")
            for column, cell in enumerate(row, 1):
                try:
                    float(cell)
                except ValueError:
                    name = f" ({names[column - 1]!r})" if names else ""
                    hint = "; columns are separated by commas" if width == 1 and any(
                        separator in cell.strip() for separator in ";\t ") else ""
                    raise ValueError(f"row {data_row}, column {column}{name}: {cell!r} is not "
                                     f"a number{hint}") from None


def _check_names(names: list[str]) -> None:
    """Parameter names from a header: none empty, none twice."""
    for column, name in enumerate(names, 1):
        if not name:
            raise ValueError(f"column {column} of the header has no name")
        if names.index(name) + 1 != column:
            raise ValueError(f"column name {name!r} appears twice (columns "
                             f"{names.index(name) + 1} and {column})")


def _checked(matrix: np.ndarray, names: list[str] | None) -> np.ndarray:
    """``matrix`` as float64 if it is a non-empty 2-D matrix of finite numbers, else ValueError
    naming the first offending row and column (counted from 1, data rows only)."""
    import numpy as np

    if matrix.dtype.kind not in "biuf":
        raise ValueError(f"candidates must be real numbers, not {matrix.dtype} values")
    if matrix.ndim != 2:
        raise ValueError(f"candidates must be a 2-D matrix (rows x parameters), not an array "
                         f"of shape {matrix.shape}")
    if matrix.size == 0:
        missing = "rows" if matrix.shape[0] == 0 else "columns"
        raise ValueError(f"no candidates: the matrix has no {missing}")
    matrix = matrix.astype(np.float64)
    bad = np.argwhere(~np.isfinite(matrix))
    if len(bad):
        row, column = (int(i) for i in bad[0])
        name = f" ({names[column]!r})" if names else ""
        raise ValueError(f"row {row + 1}, column {column + 1}{name}: {matrix[row, column]} is "
                         f"not a finite number")
    return matrix


def _positive(text: str) -> float:
    """A number of seconds > 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _client(args: argparse.Namespace) -> Client:
    return Client(args.url, args.api_key)


def _study(client: Client, ref: str) -> Study:
    """The study with id ``ref`` if it is all ASCII digits and one has that id, else named
    ``ref`` (int() reads other scripts' digits too: a study named "٢" was study 2)."""
    if not (ref.isascii() and ref.isdigit()):
        return client.study(ref)
    try:
        return client.study(int(ref))
    except NotFoundError:
        pass
    try:
        return client.study(ref)
    except NotFoundError:
        raise NotFoundError(404, f"no study with id or name {ref!r}", "study") from None


def _with_study(run: Callable[[argparse.Namespace, Client, Study], int]
                ) -> Callable[[argparse.Namespace], int]:
    """An action's entry point: ``run`` with a client and the study ``args.study`` names."""
    def action(args: argparse.Namespace) -> int:
        with _client(args) as client:
            return run(args, client, _study(client, args.study))
    return action


def _create(args: argparse.Namespace) -> int:
    candidates = names = None
    if args.candidates is not None:
        try:
            candidates, names = read_candidates(args.candidates)
        except (OSError, ValueError) as exc:
            message = f"error: cannot read candidates from {args.candidates}: {exc}"
            raise SystemExit(message) from None
    with _client(args) as client:
        study = client.create_study(
            args.name, candidates=candidates, parameter_names=names,
            search_space=args.search_space, n_candidates=args.n_candidates,
            direction=args.direction, engine=dict(args.engine or []), objective=args.objective,
            max_attempts=args.max_attempts, lease_seconds=args.lease_seconds)
        info = study.info
    print(json.dumps(info.model_dump(mode="json"), indent=2) if args.json else
          f"created study {info.id} {info.name!r}: {info.n_candidates} candidates x {info.dim}, "
          f"strategy {info.strategy}, {info.mode} mode")
    return 0


def _value(trial: Any) -> str:
    return "-" if trial is None or trial.value is None else f"{trial.value:.6g}"


def _list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        studies = client.studies()
    if args.json:
        print(json.dumps([s.model_dump(mode="json", exclude={"spec"}) for s in studies], indent=2))
        return 0
    rows = [("id", "name", "strategy", "status", "trials", "completed", "batches", "best")]
    rows += [(str(s.id), s.name, s.strategy, s.status, str(s.n_trials),
              str(s.counts.get("completed", 0)), str(s.n_batches), _value(s.best))
             for s in studies]
    _table(rows)
    return 0


def _queue(args: argparse.Namespace) -> int:
    """The Redis queue the server dispatches to; exit 1 if Redis did not answer."""
    with _client(args) as client:
        state = client.queue()
    if args.json:
        print(json.dumps(state.model_dump(mode="json"), indent=2))
    elif state.redis != "ok":
        print(f"redis: {state.redis}" + (f" ({state.detail})" if state.detail else ""))
    else:
        print(f"redis: ok\njobs: {state.queued} queued, {state.started} started, "
              f"{state.failed} failed\nworkers: {len(state.workers)}")
        rows = [(w.name, w.state, w.current_job or "-",
                 w.last_heartbeat.isoformat(timespec="seconds") if w.last_heartbeat else "-")
                for w in state.workers]
        _table([("name", "state", "job", "last heartbeat"), *rows] if rows else [], indent="  ")
    return 1 if state.redis == "unreachable" else 0


#: The widest a table cell prints (longer ones end in "..."): one 200-character study name
#: made every row of ``bbkb study list`` 250 characters wide.
CELL_WIDTH = 40


def _table(rows: list[tuple[str, ...]], indent: str = "") -> None:
    """Print rows as left-aligned columns (the first row: the headers)."""
    if not rows:
        return
    rows = [tuple(c if len(c) <= CELL_WIDTH else c[: CELL_WIDTH - 3] + "..." for c in row)
            for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(indent + "  ".join(cell.ljust(width)
                                 for cell, width in zip(row, widths, strict=True)).rstrip())


def _show(args: argparse.Namespace) -> int:
    with _client(args) as client:
        study = _study(client, args.study)
        info, batches = study.info, study.batches()
    if args.json:
        out = info.model_dump(mode="json")
        out["batches"] = [b.model_dump(mode="json") for b in batches]
        print(json.dumps(out, indent=2))
        return 0
    sizes = [b.size for b in batches]
    print(f"study {info.id} {info.name!r} ({info.status}), {info.direction}")
    print(f"  candidates   {info.n_candidates} x {info.dim}: {', '.join(info.parameter_names)}")
    print(f"  engine       {info.strategy}, {info.mode} mode")
    print(f"  trials       {info.n_trials} " + " ".join(f"{k}={v}" for k, v in
                                                       sorted(info.counts.items()) if v))
    print(f"  batches      {len(batches)}" + (f", sizes min/median/max {min(sizes)}/"
                                              f"{sorted(sizes)[len(sizes) // 2]}/{max(sizes)}"
                                              if sizes else ""))
    print(f"  dictionary   {info.dictionary_size} points")
    if info.hyperparameters:
        print(f"  kernel       {_kernel_line(info.hyperparameters)}")
    if info.best is not None:
        print(f"  best         {_value(info.best)} at trial {info.best.id} "
              f"{json.dumps(info.best.parameters)}")
    return 0


def _kernel_line(hyperparameters: dict[str, Any]) -> str:
    """The current batch's kernel: its lengthscales (up to 8 listed), where they come from and
    since when (README, Kernel hyper-parameters), and lam; ``--json`` has every value."""
    lengthscale, source = hyperparameters["lengthscale"], hyperparameters.get("source")
    line = (f"lengthscale {lengthscale[0]:.4g}" if len(lengthscale) == 1
            else f"lengthscales {', '.join(f'{v:.3g}' for v in lengthscale)}"
            if len(lengthscale) <= 8
            else f"{len(lengthscale)} lengthscales, {min(lengthscale):.3g} to "
                 f"{max(lengthscale):.3g}")
    if source:
        fitted_at = hyperparameters.get("fitted_at") or 0
        line += f" ({source}" + (f", last refit at {fitted_at} observations"
                                 if fitted_at and source != "fixed" else "") + ")"
    return f"{line}, lam {hyperparameters['lam']:.4g}"


def _best(args: argparse.Namespace) -> int:
    with _client(args) as client:
        best = _study(client, args.study).best()
    if best is None:
        if args.json:
            print("null")  # still valid JSON for a pipeline; the exit code tells it apart
        else:
            print("error: no completed trial yet", file=sys.stderr)
        return 1
    print(json.dumps(best.model_dump(mode="json"), indent=2) if args.json else
          f"{_value(best)}\ttrial {best.id}\tcandidate {best.candidate}\t"
          f"{json.dumps(best.parameters)}")
    return 0


def _export(args: argparse.Namespace) -> int:
    if args.output == "-":  # stdout, as ask writes it (before: a file named "-")
        if args.json:
            raise ValueError("--json prints the file's path and rows on stdout, where -o - "
                             "writes the CSV: give -o FILE with --json")
        with _client(args) as client:
            study = _study(client, args.study)
            sys.stdout.flush()
            study.write_csv(sys.stdout.buffer)
            sys.stdout.buffer.flush()
        return 0
    with _client(args) as client:
        study = _study(client, args.study)
        path = study.export_csv(args.output or f"study-{study.id}.csv")
    if args.json:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = sum(1 for _ in csv.reader(handle)) - 1  # the header row is not a trial
        print(json.dumps({"path": str(path), "rows": max(rows, 0)}))
    else:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _dispatch_line(study: Study, status: Any) -> str:
    if status.status is None:
        return f"study {study.id} {study.name!r}: no dispatch"
    return (f"study {study.id} {study.name!r}: dispatch {status.status}, {status.finished} of "
            f"{status.n_evaluations} evaluations done, {status.in_flight} in flight "
            f"(parallelism {status.parallelism}, objective {status.objective})")


def _outcomes(counts: dict[str, int]) -> tuple[int, int]:
    """(completed, failed) trials of a study's counts; abandoned ones count as failed."""
    return counts.get("completed", 0), counts.get("failed", 0) + counts.get("abandoned", 0)


def _last_failure(study: Study) -> str:
    """The reason of the study's latest trial that failed for good (or was abandoned)."""
    statuses: tuple[TrialStatus, ...] = ("failed", "abandoned")
    for status in statuses:
        trial = next(study.trials(status=status, newest_first=True, page_size=1), None)
        if trial is not None:
            return f"trial {trial.id}: {trial.error or 'no reason given'}"
    return "no reason found"


def _wait_for(study: Study, args: argparse.Namespace,
              before: tuple[int, int] = (0, 0)) -> int:
    """Wait for the study's dispatch with a progress bar on stderr; exit 1 if it ends paused,
    the timeout passes, or it is done without one completed evaluation (every one failed: a
    broken objective): the dispatch's own counts say so, or, from an older server without
    them, the study's since ``before``, its (completed, failed) counts at the start (by
    default: none, so a study without a completed trial). Ctrl-C stops the waiting, not the
    dispatch."""
    try:
        status = study.wait(progress=not args.quiet, timeout=args.timeout)
    except TimeoutError:
        status = study.dispatch_status()
        print(f"error: still running after {args.timeout:g} s: {_dispatch_line(study, status)}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"stopped waiting; the dispatch goes on (bbkb study wait {study.id})",
              file=sys.stderr)
        return 130
    completed, failed = _outcomes(study.info.counts)
    if args.json:
        print(json.dumps(status.model_dump(mode="json")))
    else:  # a dispatch whose trials all failed is done too: say so
        print(f"{_dispatch_line(study, status)}; the study has {completed} completed and "
              f"{failed} failed trials")
    if status.completed is not None:  # the dispatch's own counts
        none_completed, n_failed = status.completed == 0, status.finished - status.completed
    else:
        none_completed, n_failed = completed == before[0], failed - before[1]
    if status.status == "done" and none_completed and n_failed > 0:
        print(f"error: the dispatch completed none of its evaluations: {n_failed} "
              f"trial(s) failed for good, the latest {_last_failure(study)}", file=sys.stderr)
        return 1
    return 0 if status.status in ("done", None) else 1


def _dispatch(args: argparse.Namespace) -> int:
    with _client(args) as client:
        study = _study(client, args.study)
        before = _outcomes(study.info.counts) if args.wait else (0, 0)
        status = study.dispatch(args.n_evaluations, parallelism=args.parallelism,
                                objective=args.objective, job_timeout=args.job_timeout)
        if args.wait:
            return _wait_for(study, args, before)
    print(json.dumps(status.model_dump(mode="json")) if args.json else
          _dispatch_line(study, status))
    return 0


def _wait(args: argparse.Namespace) -> int:
    with _client(args) as client:
        return _wait_for(_study(client, args.study), args)


def _lifecycle(args: argparse.Namespace) -> int:
    """pause, resume, delete."""
    with _client(args) as client:
        study = _study(client, args.study)
        if args.study_command == "delete":
            if not args.yes:
                if not sys.stdin.isatty():
                    raise InvalidArgument("deleting a study removes its trials for good: pass "
                                          "--yes to confirm")
                info = study.info
                answer = input(f"delete study {info.id} {info.name!r} and its {info.n_trials} "
                               "trials? [y/N] ")
                if answer.strip().lower() not in ("y", "yes"):
                    print("not deleted", file=sys.stderr)
                    return 1
            study.delete()
            print(json.dumps({"deleted": study.id}) if args.json else
                  f"deleted study {study.id} {study.name!r}")
            return 0
        # the study and its dispatch together: a worker that refused the objective paused
        # only the dispatch, and a study paused alone leaves its dispatch "running"
        pause = args.study_command == "pause"
        info = study.pause() if pause else study.resume()
        dispatch = study.dispatch_status()
        if dispatch.status == ("running" if pause else "paused"):
            try:
                dispatch = study.pause_dispatch() if pause else study.resume_dispatch()
            except ConflictError:  # it finished meanwhile: nothing left to pause or resume
                dispatch = study.dispatch_status()
    if args.json:
        print(json.dumps({"study": info.model_dump(mode="json"),
                          "dispatch": dispatch.model_dump(mode="json")}))
    else:
        print(f"study {info.id} {info.name!r}: {info.status}"
              + (f", dispatch {dispatch.status}" if dispatch.status else ""))
    return 0


STUDY_HELP = "study id or name (an id takes precedence over an all-digit name)"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``bbkb study ...`` on the main parser's subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="API address (default: BBKB_URL, else http://127.0.0.1:8000)")
    common.add_argument("--api-key", help="API key (default: BBKB_API_KEY)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")

    queue = sub.add_parser("queue", parents=[common], help="jobs and workers of the Redis queue",
                           description="The Redis queue the server dispatches to: jobs queued, "
                                       "started and failed, and the live workers. Exit 1 if "
                                       "the server's Redis does not answer.")
    queue.set_defaults(run=_queue)

    study = sub.add_parser("study", help="create, list, show, dispatch ... studies",
                           description=__doc__.split("\n\n")[0])
    actions = study.add_subparsers(dest="study_command", required=True)

    create = actions.add_parser("create", parents=[common], help="create a study",
                                description="Candidates from a .npy or .csv file (a header row "
                                            "names the parameters), or a search space.")
    create.add_argument("name")
    source = create.add_mutually_exclusive_group(required=True)
    source.add_argument("--candidates", type=Path, help="candidate matrix (.npy or .csv)")
    source.add_argument("--search-space", type=_json_argument, metavar="JSON|@FILE",
                        help='e.g. \'[{"name": "lr", "low": 1e-4, "high": 0.1, "log": true}]\'')
    create.add_argument("--n-candidates", type=int, help="candidates drawn from the search space")
    create.add_argument("--direction", choices=["maximize", "minimize"], default="maximize")
    create.add_argument("--engine", "-e", type=_engine_option, action="append", metavar="KEY=VALUE",
                        help="engine setting, repeatable: -e strategy=bbkb -e mode=sync "
                             "-e 'kernel={\"name\": \"rbf\", \"lengthscale\": 2}'")
    create.add_argument("--objective", help="built-in objective or module:function for workers")
    create.add_argument("--max-attempts", type=int, default=3)
    create.add_argument("--lease-seconds", type=float, default=300.0)
    create.set_defaults(run=_create)

    listing = actions.add_parser("list", parents=[common], help="every study of this key")
    listing.set_defaults(run=_list)
    best_description = ("The best completed trial. Without one yet: exit 1, with 'error: no "
                        "completed trial yet' on stderr, or 'null' on stdout with --json.")
    for name, run, text, description in (
            ("show", _show, "status, counts, batches, best", None),
            ("best", _best, "the best completed trial", best_description)):
        action = actions.add_parser(name, parents=[common], help=text, description=description)
        action.add_argument("study", help=STUDY_HELP)
        action.set_defaults(run=run)
    export = actions.add_parser("export", parents=[common], help="every trial as CSV",
                                description="Every trial as CSV, one row per trial, into a "
                                            "file, or stdout with -o -. With --json, "
                                            'prints {"path": ..., "rows": ...} on stdout '
                                            "instead of the note 'wrote PATH' on stderr.")
    export.add_argument("study", help=STUDY_HELP)
    export.add_argument("--output", "-o", help="file to write, - for stdout (default: "
                        "study-<id>.csv)")
    export.set_defaults(run=_export)
    sheet_cli.add_actions(actions, common, STUDY_HELP, _with_study)

    waiting = argparse.ArgumentParser(add_help=False)
    waiting.add_argument("--timeout", type=_positive, help="give up waiting after SECONDS "
                         "(exit 1; the dispatch goes on)")
    waiting.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    dispatch = actions.add_parser(
        "dispatch", parents=[common, waiting], help="evaluate trials on the `bbkb worker`s",
        description="Have the server evaluate the study's objective on its Redis workers "
                    "(bbkb worker) until N more trials are done. Returns at once, or with "
                    "--wait when the dispatch is done (exit 1 if it ends paused).")
    dispatch.add_argument("study", help=STUDY_HELP)
    dispatch.add_argument("--n-evaluations", "-n", type=int, required=True, metavar="N")
    dispatch.add_argument("--parallelism", "-p", type=int, default=8,
                          help="trials evaluated at once (default 8)")
    dispatch.add_argument("--objective", help="default: the study's")
    dispatch.add_argument("--job-timeout", type=int, default=3600, metavar="SECONDS",
                          help="an evaluation running longer is stopped (default 3600)")
    dispatch.add_argument("--wait", "-w", action="store_true",
                          help="wait for the dispatch, with a progress bar on stderr")
    dispatch.set_defaults(run=_dispatch)
    wait = actions.add_parser(
        "wait", parents=[common, waiting], help="wait for the study's dispatch",
        description="Wait for the study's dispatch with a progress bar on stderr; exit 1 if it "
                    "ends paused. Ctrl-C stops the waiting, not the dispatch.")
    wait.add_argument("study", help=STUDY_HELP)
    wait.set_defaults(run=_wait)
    for name, text in (("pause", "hand out no trials, and pause the dispatch (results are "
                                 "still taken)"),
                       ("resume", "hand out trials again, and resume a paused dispatch"),
                       ("delete", "delete the study and its trials")):
        action = actions.add_parser(name, parents=[common], help=text)
        action.add_argument("study", help=STUDY_HELP)
        if name == "delete":
            action.add_argument("--yes", "-y", action="store_true",
                                help="do not ask (needed when stdin is not a terminal)")
        action.set_defaults(run=_lifecycle)


def _key_hint(args: argparse.Namespace) -> str:
    """Where the refused key came from, or how to give one (a 401)."""
    if args.api_key:
        source = "--api-key"
    elif os.environ.get("BBKB_API_KEY"):
        source = "BBKB_API_KEY"
    elif os.environ.get("BBKB_API_KEY_FILE"):
        source = f"the file BBKB_API_KEY_FILE names ({os.environ['BBKB_API_KEY_FILE']})"
    else:
        return ("this server needs an API key: give --api-key KEY or set BBKB_API_KEY (or "
                "BBKB_API_KEY_FILE, a file holding it); `bbkb keys create --owner NAME` on the "
                "server's database makes one")
    return (f"the key of {source}; a key works on the server whose database `bbkb keys "
            f"create` wrote it into")


def run(args: argparse.Namespace) -> int:
    """Run a study action; errors become one line on stderr (exit 1, 2 if the server is
    unreachable), not a traceback."""
    try:
        return int(args.run(args))
    except BrokenPipeError:
        raise  # stdout closed by its reader: bbkb's main ends quietly
    except InvalidArgument as exc:
        print(f"error: {exc}", file=sys.stderr)
    except APIError as exc:
        where = f" (field {exc.field})" if getattr(exc, "field", None) else ""
        if exc.status_code == 404 and not where:  # no such route, not a missing study
            where = " (no such API route: give --url / BBKB_URL as the server's address, " \
                    "e.g. http://127.0.0.1:8000, without /v1)"
        elif exc.status_code == 401:
            where = f" ({_key_hint(args)})"
        print(f"error: {exc.detail}{where}", file=sys.stderr)
    except BBKBError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except pydantic.ValidationError as exc:
        print(f"error: {invalid_argument(exc)}", file=sys.stderr)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
    return 1
