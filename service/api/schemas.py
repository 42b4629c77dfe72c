"""Request and response models of the REST API (one definition, shared with the client SDK).

Only pydantic is imported here, so the SDK can use these models without numpy or the server.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from ..searchspace import Parameter
from .numbers import JsonBool, JsonFloat, JsonInt, NotBlank, Number, PlainText

#: The longest name (the columns' VARCHAR(200)).
NAME_LENGTH = 200
Name = Annotated[str, Field(min_length=1, max_length=NAME_LENGTH), *PlainText, NotBlank]


def _composed_fits(name: str) -> str:
    """NFC can lengthen a name (U+0958 becomes two characters, some presentation forms
    three): the stored form must fit the column too (a 500 on PostgreSQL before)."""
    if len(name) > NAME_LENGTH:
        raise ValueError(f"the name's composed (NFC) form has {len(name)} characters; at "
                         f"most {NAME_LENGTH}")
    return name


#: A study's name, in Unicode's composed form (NFC): "é" typed as one character or as "e" and a
#: combining accent is the same name, found by the same ``name=``.
StudyName = Annotated[Name, AfterValidator(partial(unicodedata.normalize, "NFC")),
                      AfterValidator(_composed_fits)]


def name_forms(name: str) -> set[str]:
    """The forms a study called ``name`` may be stored under: as typed, and composed (NFC), as
    names are stored now (a study created before holds the form it was given)."""
    return {name, unicodedata.normalize("NFC", name)}


WorkerId = Annotated[str, Field(min_length=1, max_length=200), *PlainText]
#: An evaluation's result: a JSON number (not a bool or a string) within +-VALUE_LIMIT (the
#: engine's MAX_MAGNITUDE). The limit is checked where a value is used (service/trials.py: its
#: 422 names the row of a bulk upload) and published here, in the OpenAPI schema.
VALUE_LIMIT = 1e100
ResultValue = Annotated[float, Number, Field(strict=True, allow_inf_nan=False, json_schema_extra={
    "minimum": -VALUE_LIMIT, "maximum": VALUE_LIMIT})]
#: An inline candidate's number: the engine's bound (+-VALUE_LIMIT, checked there), published.
Feature = Annotated[JsonFloat, Field(json_schema_extra={"minimum": -VALUE_LIMIT,
                                                        "maximum": VALUE_LIMIT})]
#: A search space's candidate count. The bounds go inside the Optional, before JsonInt's check:
#: on the Optional, or after the check, pydantic publishes them as "ge" and "le", which are not
#: JSON Schema (minimum and maximum).
NCandidates = Annotated[int, Field(ge=1, le=10_000_000), *JsonInt.__metadata__]
#: The longest failure reason a trial keeps (characters).
REASON_LIMIT = 10_000
TrialStatus = Literal["pending", "running", "completed", "failed", "abandoned"]


class FieldError(ValueError):
    """A model validator's error about one of the model's fields, which its 422 (and the SDK's
    InvalidArgument) names: pydantic locates a model validator's errors at the model."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def error_field(error: Mapping[str, Any], skip: tuple[str, ...] = ()) -> str | None:
    """The dotted location of one of pydantic's errors (without the parts in ``skip``), with a
    :class:`FieldError`'s field; None for the whole input."""
    loc = [str(p) for p in error.get("loc", ()) if p not in skip]
    field = getattr((error.get("ctx") or {}).get("error"), "field", None)
    return ".".join(loc + ([field] if field else [])) or None


#: The trial fields of an SDK record, in order (``trial_id`` as in the server's CSV export).
TRIAL_COLUMNS = ["trial_id", "t", "candidate", "batch", "kind", "status", "value", "attempt",
                 "worker_id", "lease_expires_at", "created_at", "completed_at", "error"]


#: A CSV cell that a spreadsheet would run as a formula starts with one of these (OWASP's list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value: object) -> object:
    """``value`` for a CSV cell (the export, a lab sheet): a text beginning as a formula would (a
    parameter name or choice, a worker id, an error: ``=HYPERLINK(...)``) gets a leading
    apostrophe, which spreadsheets show as text; numbers and other text as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def parameter_column(name: str) -> str:
    """A parameter's column in a record or the CSV export: its name, or ``param_<name>`` if a
    trial field has that name or it starts with ``param_`` (so that no two columns share one)."""
    return f"param_{name}" if name in TRIAL_COLUMNS or name.startswith("param_") else name


class StudyCreate(BaseModel):
    """A new study: a candidate matrix (inline, or uploaded afterwards as .npy) or a search space.

    ``engine`` holds the optimiser's configuration: the fields of ``service.engine.EngineConfig``
    (strategy, kernel, lam, explore, mode, seed, hyperparameters, normalize, normalize_values,
    ...; an unknown key is a 422 that lists them).
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "first", "n_candidates": 4096,
         "engine": {"strategy": "bbkb", "mode": "async"},
         "search_space": [{"name": "lr", "low": 1e-4, "high": 0.1, "log": True},
                          {"name": "layers", "type": "int", "low": 1, "high": 4}]}]})

    name: StudyName
    direction: Literal["maximize", "minimize"] = "maximize"
    engine: dict[str, Any] = Field(default_factory=dict)
    candidates: list[list[Feature]] | None = Field(
        default=None, description="Inline candidate matrix (A rows of d numbers).")
    parameter_names: list[Name] | None = Field(
        default=None, description="Column names of an inline or uploaded matrix.")
    search_space: list[Parameter] | None = Field(default=None, min_length=1, max_length=200)
    n_candidates: NCandidates | None = None
    upload: JsonBool = Field(default=False, description="Candidates follow as a .npy upload.")
    objective: Annotated[str, Field(max_length=300)] | None = None
    max_attempts: JsonInt = Field(default=3, ge=1, le=100)
    lease_seconds: JsonFloat = Field(default=300.0, ge=0.1, le=7 * 86400, allow_inf_nan=False,
                                     description="A lease shorter than this has every trial "
                                     "reaped before a worker can report it (at least 0.1 s).")

    @field_validator("parameter_names")
    @classmethod
    def _distinct_names(cls, names: list[str] | None) -> list[str] | None:
        """Parameters reach objectives by name: a repeated one would hide a column."""
        repeated = sorted(n for n, k in Counter(names or []).items() if k > 1)
        if repeated:
            raise ValueError(f"parameter names must be distinct; repeated: {repeated}")
        return names

    @field_validator("search_space")
    @classmethod
    def _distinct_parameters(cls, space: list[Parameter] | None) -> list[Parameter] | None:
        """By distinct names (checked here, not in StoredParameter: stored specs load)."""
        repeated = sorted(n for n, k in Counter(p.name for p in space or []).items() if k > 1)
        if repeated:
            raise ValueError(f"search space parameter names must be unique; repeated: {repeated}")
        return space

    @field_validator("candidates")
    @classmethod
    def _matrix(cls, rows: list[list[float]] | None) -> list[list[float]] | None:
        """A matrix: at least one row, every row of the same, non-zero length (checked here so
        that the SDK refuses it before any request, as the server does)."""
        if rows is None:
            return rows
        if not rows:
            raise ValueError("the candidate matrix has no rows")
        widths = sorted({len(row) for row in rows})
        if len(widths) > 1:
            raise ValueError(f"candidate rows have different lengths ({widths[0]} and "
                             f"{widths[-1]} numbers)")
        if widths == [0]:
            raise ValueError("candidate rows are empty: each needs one number per parameter")
        return rows

    @model_validator(mode="after")
    def _one_source(self) -> StudyCreate:
        given = [name for name, used in (("candidates", self.candidates is not None),
                                         ("search_space", self.search_space is not None),
                                         ("upload", self.upload)) if used]
        if len(given) != 1:  # named: the one too many, or where the matrix would go
            raise FieldError("give exactly one of candidates, search_space or upload=true",
                             given[-1] if given else "candidates")
        if self.n_candidates is not None and self.search_space is None:
            raise FieldError("n_candidates goes with a search_space (that many are sampled); "
                             "inline or uploaded candidates are all used", "n_candidates")
        if self.search_space is not None and self.n_candidates is None:
            raise FieldError("a search space needs n_candidates", "n_candidates")
        return self


class TrialPublic(BaseModel):
    id: int
    t: int
    candidate: int
    parameters: dict[str, Any]
    batch: int
    kind: Literal["suggested", "imported"]
    status: TrialStatus
    value: float | None = None
    attempt: int
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    created_at: datetime | None = None
    completed_at: datetime | None = None
    error: str | None = Field(default=None, description=(
        "The last failure reason or lost lease (\"lease expired (attempt 1)\"), kept when a "
        "later attempt completes the trial: a record of what happened, not its status."))


class StudyPublic(BaseModel):
    id: int
    name: str
    status: str
    direction: str
    strategy: str
    mode: str
    n_candidates: int
    dim: int
    parameter_names: list[str]
    n_trials: int
    counts: dict[str, int]
    n_batches: int
    dictionary_size: int
    hyperparameters: dict[str, Any] | None = Field(
        default=None, description="Kernel hyper-parameters of the current batch.")
    best: TrialPublic | None = None
    created_at: datetime
    spec: dict[str, Any]


class StudyList(BaseModel):
    """A page of studies in id order; ``next_after`` is the ``after`` of the next page (None on
    the last page)."""

    studies: list[StudyPublic]
    next_after: int | None = None


class SuggestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"worker_id": "rig-1", "count": 2}]})

    worker_id: WorkerId
    count: JsonInt = Field(default=1, ge=1, le=10_000)


class Suggestions(BaseModel):
    trials: list[TrialPublic]
    waiting: str | None = Field(default=None, description=(
        "Why fewer trials than asked: a sync batch waits for results, the ask used its "
        "time (then ask again), or a deterministic study has proposed every candidate."))
    retry_after: float | None = None


class CompleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"value": 0.93}]})

    value: ResultValue
    worker_id: WorkerId | None = Field(default=None, description=(
        "Who sends the result; not checked (unlike fail and heartbeat): a result is used "
        "whoever holds the lease now, so that no evaluation is lost."))


class FailRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"reason": "the instrument timed out", "retryable": True}]})

    reason: Annotated[str, Field(max_length=REASON_LIMIT)] = ""
    retryable: JsonBool = True
    worker_id: WorkerId | None = None
    release: JsonBool = Field(default=False, description=(
        "The evaluation was never tried (the worker could not run the objective): back to the "
        "pool without counting the attempt. retryable is then ignored."))

    @field_validator("reason")
    @classmethod
    def _no_nul(cls, reason: str) -> str:
        if "\x00" in reason:  # PostgreSQL's text cannot hold it (the database would refuse)
            raise ValueError("may not contain NUL characters (\\x00); escape them")
        return reason


class HeartbeatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_id: WorkerId | None = None


class Observation(BaseModel):
    """An existing result for warm start: a candidate index and its value."""

    model_config = ConfigDict(extra="forbid")

    candidate: JsonInt = Field(ge=0)
    value: ResultValue


class ImportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"observations": [{"candidate": 17, "value": 0.41},
                                  {"candidate": 3, "value": 0.77}]}]})

    observations: list[Observation] = Field(min_length=1, max_length=1_000_000)


class ResultRow(BaseModel):
    """A trial's result in a bulk upload: its value, or the error of an evaluation that failed
    (``retryable`` as in a trial's fail)."""

    model_config = ConfigDict(extra="forbid")

    trial_id: JsonInt = Field(ge=1, le=2**62)
    value: ResultValue | None = None
    error: Annotated[str, Field(max_length=REASON_LIMIT)] | None = None
    retryable: JsonBool = True

    @model_validator(mode="after")
    def _one_outcome(self) -> ResultRow:
        if (self.value is None) == (self.error is None):
            raise ValueError("give either a value or an error")
        if self.error is not None and "\x00" in self.error:
            raise ValueError("error may not contain NUL characters (\\x00); escape them")
        return self


class ResultsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"results": [{"trial_id": 1, "value": 0.93},
                              {"trial_id": 2, "error": "sample spoiled", "retryable": False}]}]})

    results: list[ResultRow] = Field(min_length=1, max_length=100_000)


class ImportSummary(BaseModel):
    imported: int = Field(description="observations imported, each a completed trial")


class ResultsSummary(BaseModel):
    """What a bulk upload of results did, row by row."""

    completed: int = Field(description="rows whose value completed a trial")
    failed: int = Field(description="rows whose error failed a running trial (back to the "
                        "pool if retryable and attempts remain)")
    unchanged: int = Field(description="rows that changed nothing: the value the trial "
                           "already has, an error for a trial no longer running, a repeat")
    skipped: int = Field(default=0, description="CSV rows with a blank value (not measured "
                         "yet): left as they are")


class TrialPage(BaseModel):
    trials: list[TrialPublic]
    next_after: int | None = Field(default=None, description=(
        "The last trial's t: pass it as after= (with the same order and filters) for the next "
        "page; null: this page is the last."))


class BatchPublic(BaseModel):
    index: int
    start_t: int
    size: int
    stop_reason: str | None = Field(description="Why the batch closed (None: still open): "
                                    "global / local (BBKB Lemmas 1 / 3), product (GP-BUCB), "
                                    "sequential, fixed, initial (the initial design) or repeat "
                                    "(before the first kernel fit, at the first repeated arm).")
    dictionary_size: int
    embedding_dim: int
    hyperparameters: dict[str, Any] | None = Field(
        default=None, description="Kernel hyper-parameters the batch used: lengthscale (one, or "
        "one per dimension), lam, the last fit's variance and noise, fitted_at (observations) "
        "and source, where the lengthscales come from: fixed (the config), start (the RMS "
        "distance, no fit kept yet), floor (the neighbour floor, the shortest single lengthscale "
        "that links nearest candidates: fits put it below, or the candidates are too sparse for "
        "the RMS start) or fit (smoothing x the kept fit: 1.25, or where that is below "
        "the floor the smoothest lengthscale the fit's likelihood does not reject), and "
        "smoothing, what the next refit divides the kernel's lengthscales by to start from "
        "(where source is fit, the kernel's over the kept fit's; null without a kept fit; "
        "absent in batches stored before it was recorded, where it was "
        "1.25), and ard_retry_at, the distinct arms from which a refit of a single "
        "lengthscale tries one per dimension again (0 before the first try and where none is "
        "tried: ard false, a fixed kernel, GSSBO; absent in batches stored before it was "
        "recorded); null in batches stored before any of this "
        "was recorded.")
    open_seconds: float | None = Field(description="Opening the batch: dictionary sampling, "
                                       "kernel refit and posterior build.")
    resparsify_seconds: float | None = Field(
        default=None, description="The dictionary resampling alone; null without a dictionary "
        "(GP-UCB family, uniform) and for batches stored before it was measured.")
    refit_seconds: float | None = Field(
        default=None, description="The engine's kernel hyper-parameter refit (automatic "
        "kernels), part of open_seconds; null at batches that did not refit, for GSSBO (its "
        "own fit is part of open_seconds) and for batches stored before it was measured.")
    opened_at: datetime | None
    closed_at: datetime | None


class BatchList(BaseModel):
    batches: list[BatchPublic]
    next_after: int | None = Field(default=None, description="The ``after`` of the next page "
                                   "(the last index of this one); null after the last page.")


class BatchDetail(BatchPublic):
    """One batch with the dictionary it used: its inducing candidates, as indices and as
    named parameters (empty for strategies without one)."""

    dictionary: list[int] = Field(description="Candidate indices of the batch's dictionary "
                                  "(the inducing points of its Nystrom posterior), ascending.")
    dictionary_parameters: list[dict[str, Any]] = Field(
        description="The same candidates' parameters, in the same order.")


class ErrorBody(BaseModel):
    detail: str
    field: str | None = None


class DispatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n_evaluations: JsonInt = Field(ge=1, le=10_000_000)
    parallelism: JsonInt = Field(default=8, ge=1, le=10_000)
    objective: Annotated[str, Field(max_length=300)] | None = None
    job_timeout: JsonInt = Field(default=3600, ge=1, le=7 * 86400)


class DispatchJob(BaseModel):
    """One trial for a dispatch worker: what it evaluates and how it reports back."""

    study_id: int
    trial_id: int
    worker_id: str
    candidate: int
    vector: list[float]
    parameters: dict[str, Any]
    objective: str
    job_id: str
    lease_seconds: float
    job_timeout: int = 3600


class DispatchComplete(BaseModel):
    """A dispatch worker's result; with ``next``, the server may hand it the study's next trial
    in the same transaction (no Redis round trip, no new job: see service/dispatch.py)."""

    model_config = ConfigDict(extra="forbid")

    trial_id: JsonInt = Field(ge=1, le=2**62)  # as the paths' TrialId (SQL BIGINT)
    value: ResultValue
    worker_id: WorkerId
    next: JsonBool = True


class DispatchCompleted(BaseModel):
    trial: TrialPublic
    next: DispatchJob | None = None


class DispatchStatus(BaseModel):
    status: str | None
    n_evaluations: int | None = Field(default=None, description="The dispatch's evaluations.")
    parallelism: int | None = None
    objective: str | None = None
    in_flight: int = Field(default=0, description="The study's trials pending or running.")
    finished: int = Field(default=0, description=(
        "Trials of the study with an outcome since the dispatch started."))
    completed: int | None = Field(default=None, description=(
        "Of those, the trials completed (the others failed for good: finished - completed); "
        "null for a dispatch started by an older server."))


class StudySummary(BaseModel):
    """One row of the dashboard's studies table (no candidate decoding: cheap for any study)."""

    id: int
    name: str
    status: str
    direction: str
    strategy: str
    mode: str
    n_trials: int
    completed: int
    failed: int = Field(description="Failed and abandoned trials.")
    best_value: float | None = None
    created_at: datetime
    last_activity: datetime


class SummaryList(BaseModel):
    """A page of study summaries in id order (``next_after`` as in :class:`StudyList`)."""

    studies: list[StudySummary]
    next_after: int | None = None


class StudyHistory(BaseModel):
    """Completed trials as columns, in completion order (compact at 10^5 trials).

    Rows start at ``offset`` (a poller asks only for what it has not seen), at most ``limit`` of
    them; ``next_offset`` is where the next page starts, null after the last. When the objective
    is a built-in one (data-set arms or a test function), ``noiseless`` is f at each trial's
    candidate and ``optimum`` the best f over the study's candidates, so the simple regret after
    i evaluations is ``|optimum - best of noiseless[:i]|``; both are null otherwise.
    """

    offset: int = 0
    next_offset: int | None = Field(default=None, description=(
        "The offset of the next page; null when this page holds the last completed trial."))
    t: list[int]
    value: list[float]
    elapsed: list[float] = Field(description="Seconds from the study's creation to completion.")
    noiseless: list[float] | None = None
    optimum: float | None = None


class QueueWorker(BaseModel):
    name: str
    state: str = Field(description="RQ's worker state: starting, idle, busy, suspended, ...")
    current_job: str | None = Field(default=None, description=(
        "The RQ job it evaluates, if of a study of the caller's (one pool serves every owner)."))
    last_heartbeat: datetime | None = None


class Account(BaseModel):
    """Who the caller's key is, what it may do, and the owner's quotas (``GET /v1/me``)."""

    owner: str = Field(description="The key's owner (``local`` without keys).")
    scope: str = Field(description=(
        "owner: everything; worker: reads, and asks for, heartbeats and reports trials."))
    studies: int = Field(description="The owner's studies (deleted ones aside).")
    max_studies: int | None = Field(description="BBKB_OWNER_MAX_STUDIES (null: no limit).")
    parallelism: int = Field(description=(
        "The parallelism of the owner's running dispatches together."))
    max_parallelism: int | None = Field(description=(
        "BBKB_OWNER_MAX_PARALLELISM (null: no limit)."))


class QueueState(BaseModel):
    """The Redis queue the server dispatches to, as RQ sees it (``GET /v1/queue``)."""

    redis: Literal["ok", "unreachable", "not configured"] = Field(description=(
        "Whether this server dispatches to Redis (BBKB_REDIS_URL) and Redis answered."))
    detail: str | None = Field(default=None, description="Why Redis did not answer.")
    queued: int = Field(default=0, description="Jobs waiting for a worker.")
    started: int = Field(default=0, description="Jobs a worker is evaluating.")
    failed: int = Field(default=0, description="Jobs in RQ's failed registry (kept 1 year by "
                                               "RQ; a trial's failure is also in the database).")
    workers: list[QueueWorker] = Field(default_factory=list, description=(
        "Workers listening on the queue (a worker gone without a goodbye drops out of the "
        "list once its heartbeat expires)."))
