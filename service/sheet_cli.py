"""``bbkb study ask`` and ``bbkb study results``: a lab's round trip through a sheet.

``ask`` writes the trials to evaluate as a CSV (trial_id, an empty value column, the
candidate and its parameters); the lab fills in the values it measured and ``results`` uploads
the sheet (``POST /v1/studies/{id}/results.csv``): rows with a value complete their trials, all
or nothing; blank rows wait for the next upload.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from client.records import parameter_column
from service.api.schemas import spreadsheet_text

if TYPE_CHECKING:
    from client import Client, Study

#: The sheet's columns before the parameters.
SHEET_COLUMNS = ["trial_id", "value", "candidate", "batch", "lease_expires_at"]
DEFAULT_WORKER = "lab"


def _ask(args: argparse.Namespace, client: Client, study: Study) -> int:
    answer = study.ask(args.worker_id, count=args.count)
    if not answer.trials:
        print(f"error: no trial to hand out: {answer.waiting or 'the study has none left'}",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([trial.model_dump(mode="json") for trial in answer.trials], indent=2))
        if answer.waiting:  # fewer trials than asked: the reason on stderr, stdout stays JSON
            print(f"note: {answer.waiting}", file=sys.stderr)
        return 0
    names = study.parameter_names
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(SHEET_COLUMNS + [spreadsheet_text(parameter_column(n)) for n in names])
    for trial in answer.trials:
        lease = trial.lease_expires_at.isoformat() if trial.lease_expires_at else ""
        writer.writerow([trial.id, "", trial.candidate, trial.batch, lease]
                        + [spreadsheet_text(trial.parameters.get(n, "")) for n in names])
    to_file = args.output not in (None, "-")  # "-": stdout, as study export's
    if to_file:
        Path(args.output).write_text(buffer.getvalue(), encoding="utf-8")
    else:
        sys.stdout.write(buffer.getvalue())
    where = f" to {args.output}" if to_file else ""
    note = (f"wrote {len(answer.trials)} trial(s){where}; fill in the value column and run "
            f"`bbkb study results {args.study} {args.output if to_file else 'SHEET.csv'}`")
    if answer.waiting:
        note += f" ({answer.waiting})"
    repeats = len(answer.trials) - len({trial.candidate for trial in answer.trials})
    if repeats:
        note += (f"\nnote: {repeats} row(s) repeat another row's candidate: the engine measures "
                 "a candidate again where a replicate tells it most; a study created with "
                 "`-e deterministic=true` proposes each candidate once")
    print(note, file=sys.stderr)
    return 0


def _results(args: argparse.Namespace, client: Client, study: Study) -> int:
    summary = study.upload_results_csv(args.sheet)
    if args.json:
        print(json.dumps(summary.model_dump()))
    else:
        print(f"study {study.id}: {summary.completed} completed, {summary.failed} failed, "
              f"{summary.unchanged} unchanged, {summary.skipped} without a value (skipped)")
    return 0


def add_actions(actions: argparse._SubParsersAction, common: argparse.ArgumentParser,  # type: ignore[type-arg]
                study_help: str, with_study) -> None:  # type: ignore[no-untyped-def]
    """Register ``ask`` and ``results`` under ``bbkb study``; ``with_study(run)`` wraps a
    ``run(args, client, study)`` into the action's entry point."""
    ask = actions.add_parser(
        "ask", parents=[common], help="trials to evaluate, as a CSV sheet to fill in",
        description="Ask for trials and write them as CSV (stdout, or --output): trial_id, an "
                    "empty value column, candidate, batch, lease_expires_at and the "
                    "parameters (with --json: the trials as JSON on stdout). Fill in the "
                    "values measured and upload the sheet with `bbkb study results`. Asking "
                    "again with the same --worker-id first hands back its trials still "
                    "running (a lost sheet is written again): give another id for more "
                    "trials at once. Exit 1 if no trial can be handed out (a sync batch "
                    "waiting for results, or none left).")
    ask.add_argument("study", help=study_help)
    ask.add_argument("--count", "-n", type=int, default=1, help="trials to ask for (default 1)")
    ask.add_argument("--worker-id", default=DEFAULT_WORKER,
                     help=f"who evaluates them (default {DEFAULT_WORKER!r})")
    ask.add_argument("--output", "-o", help="file to write (default: stdout)")
    ask.set_defaults(run=with_study(_ask))
    results = actions.add_parser(
        "results", parents=[common], help="upload a sheet of results (CSV)",
        description="Upload a CSV with trial_id and value columns (the sheet `bbkb study ask` "
                    "or `bbkb study export` wrote, values filled in): each row with a value "
                    "completes its trial, all or nothing; rows with a blank value are skipped, "
                    "and a value a trial already has changes nothing (uploading twice is "
                    "harmless).")
    results.add_argument("study", help=study_help)
    results.add_argument("sheet", type=Path, help="the CSV file")
    results.set_defaults(run=with_study(_results))
