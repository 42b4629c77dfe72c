"""Studies: create (inline matrix, search space, or .npy upload), list, get, pause, delete."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from ... import quotas, studies
from ...errors import Conflict, Invalid, NotFound
from ...settings import Settings
from ...store import queries
from ...store.database import lock_study, transaction
from ...store.models import Study
from ..deps import (
    AfterId,
    OwnerDep,
    PageSize,
    ReadSessionDep,
    RuntimesDep,
    SessionDep,
    SettingsDep,
    StudyId,
    WorkerDep,
    read_body,
    validated,
)
from ..errors import malformed_json
from ..schemas import StudyCreate, StudyList, StudyPublic, name_forms

router = APIRouter(prefix="/v1/studies", tags=["studies"])


def owned(session, study_id: int, owner_id: int, *, lock: bool = False) -> Study:  # type: ignore[no-untyped-def]
    """The caller's study, or 404. ``lock``: first take the study's lock (on PostgreSQL; SQLite's
    write transactions are serial), as a write that does not go through Runtimes.mutate must,
    or it races with one (a top-up rewriting the dispatch plan it read, two uploads)."""
    if lock:
        lock_study(session, study_id)
    study = session.get(Study, study_id)
    if study is None or study.owner_id != owner_id or study.status == "deleted":
        raise NotFound(f"study {study_id} not found", field="study_id")
    return study


@router.post("", status_code=201, response_model=StudyPublic, include_in_schema=False)
async def create_study(request: Request, owner: OwnerDep, settings: SettingsDep) -> Response:
    """The body is read once the caller is known and parsed in the thread pool: FastAPI parses
    a declared body on the event loop before any dependency, so a 120 MB one, unauthenticated,
    held every other request for 11 s (and validated 30 million numbers before the
    ``max_inline_numbers`` check, 1.8 GB). :func:`create_study_schema` documents it."""
    raw = await read_body(request, settings.max_json_bytes)
    if not _is_json(request.headers.get("content-type")):
        raw = b""  # as FastAPI: a body not sent as JSON is no JSON object
    study = await run_in_threadpool(_create, request, owner, settings, raw)
    return Response(study.model_dump_json(by_alias=True), status_code=201,
                    media_type="application/json")


@router.post("", status_code=201, operation_id="create_study_v1_studies_post",
             summary="Create Study")
def create_study_schema(body: StudyCreate, owner: OwnerDep) -> StudyPublic:  # pragma: no cover
    # The OpenAPI entry of create_study, registered first and so answering every request: it
    # reads the body itself, so FastAPI cannot document it. (No docstring: it would become the
    # operation's description, which create_study's route never had.)
    raise AssertionError("unreachable: create_study answers POST /v1/studies")


def _create(request: Request, owner: int, settings: Settings, raw: bytes) -> StudyPublic:
    data = _json_object(raw)
    rows = data.get("candidates")
    if isinstance(rows, list):  # counted before 10^7 numbers are validated one by one
        size = sum(len(row) if isinstance(row, list) else 1 for row in rows)
        if size > settings.max_inline_numbers:
            raise Invalid(f"{size} numbers inline; upload large candidate sets as .npy",
                          field="candidates")
    body = validated(StudyCreate.model_validate, data)
    if body.search_space is not None:
        _check_space_size(body, settings)
    spec = studies.build_spec(body, len(body.candidates[0]) if body.candidates else None,
                              settings.objective_modules)
    candidates = studies.candidates_of(body, seed=int(spec["engine"]["seed"]))
    with transaction(request.app.state.sessions) as session:
        quotas.check_studies(session, owner, settings.owner_max_studies)
        study = studies.create(session, owner, body, candidates, spec)
        return studies.study_public(session, study,
                                    studies.ParameterDecoder(session, study, candidates))


def _is_json(content_type: str | None) -> bool:
    """Whether FastAPI would read a body of this Content-Type as JSON (none: not)."""
    if not content_type:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                          and kind.endswith("+json"))


def _json_object(raw: bytes) -> dict:
    """The body's JSON object, refused as FastAPI's own body parsing refuses it (the same
    messages: service.api.errors)."""
    not_an_object = Invalid("the body must be a JSON object, sent with Content-Type: "
                            "application/json", field="body")
    if not raw:
        raise not_an_object
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Invalid(f"malformed JSON at character {exc.pos}: {exc.msg}", field="body") from exc
    except (RecursionError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise Invalid(malformed_json(exc), field="body") from exc
    if not isinstance(data, dict):
        raise not_an_object
    return data


def _check_space_size(body: StudyCreate, settings: Settings) -> None:
    """A sampled candidate matrix may hold no more float64s than the largest .npy upload."""
    width = sum(p.width for p in body.search_space or [])
    limit = max(settings.max_upload_bytes // (8 * width), 1)
    if (body.n_candidates or 0) > limit:
        raise Invalid(f"{body.n_candidates} candidates x {width} columns exceed the limit of "
                      f"{limit} candidates (BBKB_MAX_UPLOAD_BYTES)", field="n_candidates")


@router.put("/{study_id}/candidates", openapi_extra={"requestBody": {"content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    "required": True}})
async def upload_candidates(study_id: StudyId, request: Request, owner: OwnerDep,
                            settings: SettingsDep) -> StudyPublic:
    """The candidate matrix of a study created with ``upload: true``, as a .npy file."""
    await run_in_threadpool(check_owned, request, study_id, owner, True)  # before the body
    data = await read_body(request, settings.max_upload_bytes)
    return await run_in_threadpool(_attach, request, study_id, owner, data)


def check_owned(request: Request, study_id: int, owner: int, awaiting: bool = False) -> None:
    """404 before a body is read and parsed (an upload's gigabytes, a table's up to
    ``BBKB_MAX_JSON_BYTES``): a study that is not the caller's is said so, not its body's first
    error; with ``awaiting``, 409 unless it awaits its candidates."""
    with transaction(request.app.state.read_sessions) as session:
        study = owned(session, study_id, owner)
        if awaiting:
            _awaiting(study)


def _awaiting(study: Study) -> Study:
    if study.status != "awaiting_candidates":
        raise Conflict(f"study {study.id} already has its candidates", field="study_id")
    return study


def _attach(request: Request, study_id: int, owner: int, data: bytes) -> StudyPublic:
    candidates = studies.read_npy(data)
    with transaction(request.app.state.sessions) as session:
        study = _awaiting(owned(session, study_id, owner, lock=True))
        studies.attach_candidates(session, study, candidates)
        return studies.study_public(session, study,
                                    studies.ParameterDecoder(session, study, candidates))


@router.get("")
def list_studies(owner: WorkerDep, session: ReadSessionDep, settings: SettingsDep,
                 after: AfterId = 0, limit: PageSize = 100, name: str | None = None) -> StudyList:
    """The caller's studies with id > ``after`` in id order, at most ``limit`` (and
    ``BBKB_PAGE_LIMIT``; keyset pagination: follow ``next_after``), or only the one called
    ``name``: as given or in its composed form (NFC, as names are stored now; a study created
    before holds the form it was given, and may hold a character new names may not). None for
    a control character, which no name holds (the database is not asked: PostgreSQL's text
    cannot hold NUL, a 500 before)."""
    names = None
    if name is not None:
        if any(ord(c) < 0x20 for c in name):
            return StudyList(studies=[], next_after=None)
        names = name_forms(name)
    limit = min(limit, settings.page_limit)
    page = queries.studies_of(session, owner, after=after, limit=limit, names=names)
    return StudyList(studies=[studies.study_public(session, s, studies.ParameterDecoder(session, s))
                              for s in page],
                     next_after=page[-1].id if len(page) == limit and name is None else None)


@router.get("/{study_id}")
def get_study(study_id: StudyId, owner: WorkerDep, session: ReadSessionDep) -> StudyPublic:
    study = owned(session, study_id, owner)
    return studies.study_public(session, study, studies.ParameterDecoder(session, study))


def _set_status(study_id: int, owner: int, session, status: str, allowed: tuple) -> StudyPublic:  # type: ignore[no-untyped-def]
    study = owned(session, study_id, owner, lock=True)
    if study.status not in allowed:
        raise Conflict(f"study {study_id} is {study.status}", field="status")
    study.status = status  # not an engine change: the version (engine state) stays
    return studies.study_public(session, study, studies.ParameterDecoder(session, study))


@router.post("/{study_id}/pause")
def pause_study(study_id: StudyId, owner: OwnerDep, session: SessionDep) -> StudyPublic:
    return _set_status(study_id, owner, session, "paused", ("active", "paused"))


@router.post("/{study_id}/resume")
def resume_study(study_id: StudyId, owner: OwnerDep, session: SessionDep) -> StudyPublic:
    return _set_status(study_id, owner, session, "active", ("active", "paused"))


def deleted_name(name: str, study_id: int) -> str:
    """A deleted study's name: no live study's (the separator \x1f is refused in names, so
    a user's "a#deleted-1" cannot take it first) and within the column's 200 characters."""
    suffix = f"\x1fdeleted-{study_id}"
    return name[: 200 - len(suffix)] + suffix


@router.delete("/{study_id}", status_code=204, response_class=Response)
def delete_study(study_id: StudyId, owner: OwnerDep, session: SessionDep,
                 runtimes: RuntimesDep) -> None:
    study = owned(session, study_id, owner, lock=True)
    study.status = "deleted"
    study.name = deleted_name(study.name, study.id)  # frees the name for a new study
    study.version += 1
    runtimes.forget(study_id)
