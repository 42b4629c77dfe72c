"""Suggestions and trials: ask, complete, fail (one or many), heartbeat, list, export,
warm-start import."""

from __future__ import annotations

import csv
import functools
import io
import math
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, TypeAdapter
from pydantic_core import from_json

from ... import studies, trials
from ...errors import Invalid, NotFound
from ...runtime import Runtimes
from ...store import queries
from ...store.database import transaction
from ...store.models import utcnow
from ..deps import (
    MetricsDep,
    OwnerDep,
    PageSize,
    ReadSessionDep,
    RuntimesDep,
    SettingsDep,
    StudyId,
    TrialId,
    WorkerDep,
    read_body,
    validated,
)
from ..errors import malformed_json
from ..numbers import TEXT_PATTERN
from ..responses import json_answer
from ..schemas import (
    TRIAL_COLUMNS,
    CompleteRequest,
    FailRequest,
    HeartbeatRequest,
    ImportRequest,
    ImportSummary,
    Observation,
    ResultRow,
    ResultsRequest,
    ResultsSummary,
    Suggestions,
    SuggestRequest,
    TrialPage,
    TrialPublic,
    TrialStatus,
    parameter_column,
    spreadsheet_text,
)
from .studies import check_owned, owned

M = TypeVar("M", bound=BaseModel)

router = APIRouter(prefix="/v1/studies/{study_id}", tags=["trials"])


@router.post("/suggestions", response_model=Suggestions)
def create_suggestions(study_id: StudyId, body: SuggestRequest, owner: WorkerDep,
                       runtimes: RuntimesDep, metrics: MetricsDep) -> Response:
    """Trials for a worker: its running ones again (idempotent), requeued ones, then new ones."""
    def change(session, runtime, study):  # type: ignore[no-untyped-def]
        asked = trials.ask(session, runtime, study, worker_id=body.worker_id,
                           count=body.count, now=utcnow())
        return Suggestions(
            trials=[studies.trial_public(t, runtime.parameters(t.candidate))
                    for t in asked.trials],
            waiting=asked.waiting,
            retry_after=trials.RETRY_AFTER_SECONDS if asked.waiting else None)
    answer = runtimes.mutate(study_id, owner, change)
    metrics.suggestions.inc(len(answer.trials))
    return json_answer(answer)


def _trial_change(runtimes, study_id: StudyId, owner: int, action, **kwargs) -> TrialPublic:  # type: ignore[no-untyped-def]
    def change(session, runtime, study):  # type: ignore[no-untyped-def]
        trial = action(session, runtime, now=utcnow(), **kwargs)
        return studies.trial_public(trial, runtime.parameters(trial.candidate))
    return runtimes.mutate(study_id, owner, change)


@router.post("/trials/{trial_id}/complete", response_model=TrialPublic)
def complete_trial(study_id: StudyId, trial_id: TrialId, body: CompleteRequest, owner: WorkerDep,
                   runtimes: RuntimesDep, metrics: MetricsDep, request: Request) -> Response:
    trial = _trial_change(runtimes, study_id, owner, trials.complete, trial_id=trial_id,
                          value=body.value)
    metrics.results.labels("completed").inc()
    _wake_dispatcher(request)
    return json_answer(trial)


@router.post("/trials/{trial_id}/fail", response_model=TrialPublic)
def fail_trial(study_id: StudyId, trial_id: TrialId, body: FailRequest, owner: WorkerDep,
               runtimes: RuntimesDep, metrics: MetricsDep, request: Request) -> Response:
    trial = _trial_change(runtimes, study_id, owner, trials.fail, trial_id=trial_id,
                          reason=body.reason, retryable=body.retryable,
                          worker_id=body.worker_id, release=body.release)
    metrics.results.labels(trial.status).inc()
    _wake_dispatcher(request)
    return json_answer(trial)


def _wake_dispatcher(request: Request) -> None:
    """A finished trial frees a slot: let the dispatcher top up now rather than at its tick."""
    if request.app.state.dispatcher is not None:
        request.app.state.dispatcher.wake.set()


@router.post("/trials/{trial_id}/heartbeat", response_model=TrialPublic)
def heartbeat_trial(study_id: StudyId, trial_id: TrialId, owner: WorkerDep,
                    runtimes: RuntimesDep, body: HeartbeatRequest | None = None) -> Response:
    """Extend the trial's lease; the body (``worker_id``, checked if given) is optional."""
    return json_answer(_trial_change(runtimes, study_id, owner, trials.heartbeat,
                                     trial_id=trial_id,
                                     worker_id=None if body is None else body.worker_id))


def _inlined(schema: dict) -> dict:
    """A model's JSON schema with its ``$defs`` substituted (an inline OpenAPI body schema)."""
    defs = schema.pop("$defs", {})

    def walk(node):  # type: ignore[no-untyped-def]
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: walk(v) for k, v in node.items()}
        return [walk(v) for v in node] if isinstance(node, list) else node
    return walk(schema)


@router.post("/observations", openapi_extra={"requestBody": {"content": {
    "application/json": {"schema": _inlined(ImportRequest.model_json_schema())}},
    "required": True}})
async def import_observations(study_id: StudyId, request: Request, owner: OwnerDep,
                              runtimes: RuntimesDep, settings: SettingsDep) -> ImportSummary:
    """Warm start: existing (candidate, value) results enter the study as imported trials.
    The body is read here and validated in the thread pool, not on the event loop."""
    await run_in_threadpool(check_owned, request, study_id, owner)  # before the body
    raw = await read_body(request, settings.max_json_bytes)
    return ImportSummary(imported=await run_in_threadpool(
        _import, runtimes, study_id, owner, parse_observations_json, raw))


@router.post("/observations.csv", openapi_extra={"requestBody": {"content": {
    "text/csv": {"schema": {"type": "string"}}}, "required": True}})
async def import_observations_csv(study_id: StudyId, request: Request, owner: OwnerDep,
                                  runtimes: RuntimesDep, settings: SettingsDep) -> ImportSummary:
    """Warm start from a spreadsheet: a CSV with a header holding ``candidate`` and ``value``."""
    await run_in_threadpool(check_owned, request, study_id, owner)  # before the body
    raw = await read_body(request, settings.max_json_bytes)
    return ImportSummary(imported=await run_in_threadpool(
        _import, runtimes, study_id, owner, parse_observations_csv, raw))


@router.post("/results", response_model=ResultsSummary, openapi_extra={"requestBody": {
    "content": {"application/json": {"schema": _inlined(ResultsRequest.model_json_schema())}},
    "required": True}})
async def post_results(study_id: StudyId, request: Request, owner: WorkerDep,
                       runtimes: RuntimesDep, settings: SettingsDep,
                       metrics: MetricsDep) -> Response:
    """Results of many trials at once: each row a trial's value (as its complete records it)
    or the error its evaluation failed with (as its fail), all or nothing. A row that changes
    nothing (the value a trial already has) is counted, not refused: a sheet uploaded twice
    is harmless."""
    await run_in_threadpool(check_owned, request, study_id, owner)  # before the body
    raw = await read_body(request, settings.max_json_bytes)
    return await run_in_threadpool(_results, runtimes, study_id, owner, parse_results_json,
                                   raw, metrics, request)


@router.post("/results.csv", response_model=ResultsSummary, openapi_extra={"requestBody": {
    "content": {"text/csv": {"schema": {"type": "string"}}}, "required": True}})
async def post_results_csv(study_id: StudyId, request: Request, owner: WorkerDep,
                           runtimes: RuntimesDep, settings: SettingsDep,
                           metrics: MetricsDep) -> Response:
    """A lab's sheet of results: a CSV with a header holding ``trial_id`` and ``value`` (the
    export's columns, or ``bbkb study ask``'s; the others are ignored). A row with a blank value
    is skipped (not measured yet); every other row completes its trial, all or nothing."""
    await run_in_threadpool(check_owned, request, study_id, owner)  # before the body
    raw = await read_body(request, settings.max_json_bytes)
    return await run_in_threadpool(_results, runtimes, study_id, owner, parse_results_csv,
                                   raw, metrics, request)


def _results(runtimes: Runtimes, study_id: int, owner: int,
             parse: Callable[[bytes], tuple[list[trials.Result], int]], raw: bytes,
             metrics: Any, request: Request) -> Response:
    """Parse the body and record its results (in the thread pool)."""
    rows, skipped = parse(raw)
    counts = runtimes.mutate(study_id, owner,
                             lambda s, r, _: trials.post_results(s, r, rows, utcnow()))
    metrics.results.labels("completed").inc(counts["completed"])
    metrics.results.labels("failed").inc(counts["failed"])
    if counts["completed"] or counts["failed"]:
        _wake_dispatcher(request)
    return json_answer(ResultsSummary(**counts, skipped=skipped))


def parse_results_json(raw: bytes) -> tuple[list[trials.Result], int]:
    """A :class:`ResultsRequest` body."""
    rows = _json_rows(raw, ResultsRequest, "results", ResultRow)
    return [trials.Result(r.trial_id, r.value, r.error, r.retryable) for r in rows], 0


def parse_results_csv(raw: bytes) -> tuple[list[trials.Result], int]:
    """``trial_id`` and ``value`` of each row with a value, and the number of rows without."""
    out: list[trials.Result] = []
    skipped = 0
    for line, row in _csv_records(raw, ("trial_id", "value")):
        if not row["value"].strip():
            skipped += 1
            continue
        try:
            trial_id, value = _csv_int(row["trial_id"]), float(row["value"])
        except ValueError as exc:
            raise Invalid(f"CSV line {line}: {exc}", field=f"body.line{line}") from exc
        if not math.isfinite(value):
            raise Invalid(f"CSV line {line}: value must be finite", field=f"body.line{line}")
        out.append(trials.Result(trial_id, value, line=line))
    if len(out) > (limit := _max_rows(ResultsRequest, "results")):
        raise Invalid(f"at most {limit} results per upload", field="body")
    return out, skipped  # none (a sheet not filled in yet): nothing recorded, the rows skipped


def _import(runtimes: Runtimes, study_id: int, owner: int,
            parse: Callable[[bytes], Observations], raw: bytes) -> int:
    """Parse the body and import its pairs (both CPU work: called in the thread pool)."""
    pairs, lines = parse(raw)
    return runtimes.mutate(study_id, owner, lambda s, r, _: trials.import_observations(
        s, r, pairs, utcnow(), lines=lines))


#: Parsed observations: (candidate, value) pairs, and the CSV lines they came from (None: JSON).
Observations = tuple[list[tuple[int, float]], list[int] | None]


#: Rows per pydantic call. Pydantic holds the GIL while it validates: one call over 3 x 10^5 rows
#: stalled the event loop's thread for ~2 s; a chunk takes a few ms.
CHUNK_ROWS = 10_000


def _json_rows(raw: bytes, envelope: type[BaseModel], key: str, row: type[M]) -> list[M]:
    """The rows under ``key`` of a JSON body shaped as ``envelope``: the envelope validated on
    its first row (an empty or non-list body included), then the rows chunk by chunk, their
    errors located in the whole list."""
    try:
        data = from_json(raw)
    except ValueError as exc:
        raise Invalid(malformed_json(exc), field="body") from exc
    rows = data.get(key) if isinstance(data, dict) else None
    validated(envelope.model_validate,
              {**data, key: rows[:1]} if isinstance(rows, list) else data)
    if len(rows) > (limit := _max_rows(envelope, key)):
        raise Invalid(f"at most {limit} {key} per upload", field=key)
    adapter = _adapter(row)
    out: list[M] = []
    for start in range(0, len(rows), CHUNK_ROWS):
        out += validated(adapter.validate_python, rows[start : start + CHUNK_ROWS], start, key)
    return out


@functools.cache
def _adapter(row: type[M]) -> TypeAdapter[list[M]]:
    return TypeAdapter(list[row])  # type: ignore[valid-type]


@functools.cache
def _max_rows(envelope: type[BaseModel], key: str) -> int:
    return envelope.model_json_schema()["properties"][key]["maxItems"]


def parse_observations_json(raw: bytes) -> Observations:
    """An :class:`ImportRequest` body."""
    rows = _json_rows(raw, ImportRequest, "observations", Observation)
    return [(o.candidate, o.value) for o in rows], None


def parse_observations_csv(raw: bytes) -> Observations:
    """``candidate`` and ``value`` of every row, with the rows' lines (which errors name)."""
    pairs, lines = [], []
    for line, row in _csv_records(raw, ("candidate", "value")):
        try:
            pairs.append((_csv_int(row["candidate"]), float(row["value"])))
        except ValueError as exc:
            raise Invalid(f"CSV line {line}: {exc}", field=f"body.line{line}") from exc
        lines.append(line)
    if not pairs:
        raise Invalid("CSV has no rows", field="body")
    return pairs, lines


#: An id in a CSV cell: ASCII digits (int() also reads "1_0" as 10 and other scripts' digits).
_CSV_INT = re.compile(r"\s*[+-]?[0-9]+\s*")


def _csv_int(text: str) -> int:
    """An id of a CSV cell, within the ids the database holds (as the JSON routes' 2^62)."""
    if not _CSV_INT.fullmatch(text):
        raise ValueError(f"invalid integer: {text!r}")
    if abs(number := int(text)) > 2**62:
        raise ValueError(f"integer out of range (at most 2^62): {text.strip()!r:.40}")
    return number


def _csv_records(raw: bytes, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """The rows of a CSV body whose header holds the ``required`` columns, with their line
    numbers; Invalid for a missing column, a short row or malformed CSV."""
    # utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name
    reader = csv.DictReader(io.StringIO(raw.decode("utf-8-sig", errors="replace"), newline=""))
    try:
        header = reader.fieldnames or []
        missing = set(required) - set(header)
        if missing:
            raise Invalid(f"CSV header lacks column(s) {sorted(missing)}", field="body")
        twice = sorted(c for c in required if header.count(c) > 1)
        if twice:  # DictReader would keep the last one's cells
            raise Invalid(f"CSV header has column(s) {twice} more than once", field="body")
        for row in reader:
            line = reader.line_num  # the row's (last) line: blank lines and quoted breaks count
            if any(row[column] is None for column in required):
                raise Invalid(f"CSV line {line}: fewer fields than the header's "
                              f"{len(reader.fieldnames or [])}", field=f"body.line{line}")
            yield line, row
    except csv.Error as exc:  # e.g. a bare carriage return inside a field
        raise Invalid(f"malformed CSV (line {reader.line_num}): {exc}", field="body") from exc


@router.get("/trials")
def list_trials(study_id: StudyId, owner: WorkerDep, session: ReadSessionDep, settings: SettingsDep,
                runtimes: RuntimesDep,
                after: Annotated[int | None, Query(
                    ge=-1, le=2**62, description="The cursor: the t the previous page ended at "
                    "(its next_after), exclusive; omitted: the first page of the order (-1 too "
                    "with order=asc)")] = None,
                limit: PageSize = 100,
                order: Annotated[Literal["asc", "desc"], Query(
                    description="asc: oldest first (t ascending); desc: newest first")] = "asc",
                status: TrialStatus | None = None,
                worker_id: Annotated[str | None, Query(min_length=1, max_length=200,
                                                     pattern=TEXT_PATTERN)] = None,
                batch: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
                kind: Literal["suggested", "imported"] | None = None) -> TrialPage:
    """Trials in t order (``order=asc``, the default) or newest first (``order=desc``), a page
    after the cursor ``after`` in that order: with asc the trials with t > after, with desc
    those with t < after. Keyset pagination, fast at any depth: pass the answer's
    ``next_after`` as ``after`` (with the same order and filters) until it is null. Optionally
    only the trials with the given status, worker, batch and kind (each an index range, read
    forwards or backwards)."""
    if order == "desc" and after is not None and after < 0:
        raise Invalid("after must be a trial's t (>= 0) with order=desc; omit it for the "
                      "newest trials", field="after")
    study = owned(session, study_id, owner)
    page = queries.trial_page(session, study_id, after=after,
                              limit=min(limit, settings.page_limit), status=status,
                              worker_id=worker_id, batch=batch, kind=kind,
                              descending=order == "desc")
    decode = studies.ParameterDecoder(session, study, runtimes.candidates(study_id))
    decode.prefetch(t.candidate for t in page)
    return TrialPage(trials=[studies.trial_public(t, decode(t.candidate)) for t in page],
                     next_after=page[-1].t if len(page) == min(limit, settings.page_limit)
                     else None)


@router.get("/trials/{trial_id}")
def get_trial(study_id: StudyId, trial_id: TrialId, owner: WorkerDep,
              session: ReadSessionDep) -> TrialPublic:
    study = owned(session, study_id, owner)
    trial = queries.trial_by_id(session, study_id, trial_id)
    if trial is None:
        raise NotFound(f"trial {trial_id} not found in study {study_id}", field="trial_id")
    return studies.trial_public(trial, studies.ParameterDecoder(session, study)(trial.candidate))


@router.get("/export", response_class=StreamingResponse,
            responses={200: {"content": {"text/csv": {}}}})
def export_trials(study_id: StudyId, owner: WorkerDep, request: Request,
                  format: Literal["csv"] = "csv") -> StreamingResponse:
    """Every trial as CSV (streamed page by page), with named parameters as columns."""
    with transaction(request.app.state.read_sessions) as session:
        study = owned(session, study_id, owner)
        names = studies.parameter_names(study.spec, study.dim)
        # candidates read once here, not once per page (none yet: no trials either)
        awaiting = study.status == "awaiting_candidates"
        decode = studies.ParameterDecoder(session, study, np.empty((0, study.dim)) if awaiting
                                          else queries.load_candidates(session, study_id))
    return StreamingResponse(_csv_rows(request, study_id, names, decode), media_type="text/csv",
                             headers={"Content-Disposition":
                                      f'attachment; filename="study-{study_id}.csv"'})


def _iso(moment: datetime | None) -> str:
    """A time as the JSON answers write it (UTC as "Z")."""
    return "" if moment is None else moment.isoformat().replace("+00:00", "Z")


def _csv_rows(request: Request, study_id: StudyId, names: list[str],
              decode: studies.ParameterDecoder) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(TRIAL_COLUMNS + [spreadsheet_text(parameter_column(n)) for n in names])
    after = -1
    while True:
        with transaction(request.app.state.read_sessions) as session:
            page = queries.trial_page(session, study_id, after=after, limit=5000, status=None)
            for t in page:
                params = decode(t.candidate)
                writer.writerow([t.id, t.t, t.candidate, t.batch, t.kind, t.status,
                                 "" if t.value is None else repr(t.value), t.attempt,
                                 spreadsheet_text(t.worker_id or ""),
                                 _iso(t.lease_expires_at), _iso(t.created_at),
                                 _iso(t.completed_at), spreadsheet_text(t.error or "")]
                                + [spreadsheet_text(params.get(n, "")) for n in names])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        if len(page) < 5000:
            return
        after = page[-1].t
