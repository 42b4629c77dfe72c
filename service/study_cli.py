"""``bbkb study create | list | show | best | export``: studies from the shell, through the SDK.

The server is reached like the SDK does: ``--url`` / ``BBKB_URL`` and ``--api-key`` /
``BBKB_API_KEY``. A study is named by its id or its name. API errors print their message (and
the offending field) and exit 1; an unreachable server exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from client import Client
from client.errors import APIError, BBKBError
from client.study import Study


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
        text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None


def read_candidates(path: Path) -> tuple[Any, list[str] | None]:
    """A candidate matrix from .npy, or from .csv with a header row of parameter names."""
    import numpy as np

    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False), None
    with path.open() as handle:
        header = handle.readline().strip().split(",")
    try:
        [float(h) for h in header]
        names, skip = None, 0
    except ValueError:
        names, skip = [h.strip() for h in header], 1
    matrix = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2)
    return matrix, names


def _client(args: argparse.Namespace) -> Client:
    return Client(args.url, args.api_key)


def _study(client: Client, ref: str) -> Study:
    return client.study(int(ref) if ref.isdigit() else ref)


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
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return 0


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
    if info.best is not None:
        print(f"  best         {_value(info.best)} at trial {info.best.id} "
              f"{json.dumps(info.best.parameters)}")
    return 0


def _best(args: argparse.Namespace) -> int:
    with _client(args) as client:
        best = _study(client, args.study).best()
    if best is None:
        print("no completed trial yet", file=sys.stderr)
        return 1
    print(json.dumps(best.model_dump(mode="json"), indent=2) if args.json else
          f"{_value(best)}\ttrial {best.id}\tcandidate {best.candidate}\t"
          f"{json.dumps(best.parameters)}")
    return 0


def _export(args: argparse.Namespace) -> int:
    with _client(args) as client:
        study = _study(client, args.study)
        path = study.export_csv(args.output or f"study-{study.id}.csv")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``bbkb study ...`` on the main parser's subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", help="API address (default: BBKB_URL or http://127.0.0.1:8000)")
    common.add_argument("--api-key", help="API key (default: BBKB_API_KEY)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")

    study = sub.add_parser("study", help="create, list, show, best, export studies",
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
    for name, run, text in (("show", _show, "status, counts, batches, best"),
                            ("best", _best, "the best completed trial")):
        action = actions.add_parser(name, parents=[common], help=text)
        action.add_argument("study", help="study id or name")
        action.set_defaults(run=run)
    export = actions.add_parser("export", parents=[common], help="every trial as CSV")
    export.add_argument("study", help="study id or name")
    export.add_argument("--output", "-o", help="file to write (default: study-<id>.csv)")
    export.set_defaults(run=_export)


def run(args: argparse.Namespace) -> int:
    """Run a study action; API errors become one line on stderr, not a traceback."""
    try:
        return int(args.run(args))
    except APIError as exc:
        where = f" (field {exc.field})" if getattr(exc, "field", None) else ""
        print(f"error: {exc.detail}{where}", file=sys.stderr)
        return 1
    except BBKBError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
