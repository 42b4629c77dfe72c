"""Batch history (sizes, stop reasons, dictionary sizes, timings; one batch with its
dictionary) and the best trial."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from ... import studies
from ...errors import NotFound
from ...store import queries
from ...store.arrays import from_bytes
from ..deps import ReadSessionDep, StudyId, WorkerDep
from ..schemas import BatchDetail, BatchList, BatchPublic, TrialPublic
from .studies import owned

router = APIRouter(prefix="/v1/studies/{study_id}", tags=["batches"])

#: Batches a page of the batch list holds by default (about 5 MB of JSON) and at most.
BATCH_PAGE = 10_000
BATCH_PAGE_MAX = 50_000


@router.get("/batches")
def list_batches(study_id: StudyId, owner: WorkerDep, session: ReadSessionDep,
                 after: Annotated[int, Query(ge=-1, le=2**31 - 1)] = -1,
                 limit: Annotated[int, Query(ge=1, le=BATCH_PAGE_MAX)] = BATCH_PAGE,
                 ) -> BatchList:
    """At most ``limit`` batches in index order, only those with index > ``after`` (a poller
    asks for the ones it has not seen, as with the trials' ``after``; -1: from the first);
    ``next_after`` is the ``after`` of the next page, null after the last."""
    owned(session, study_id, owner)
    rows = queries.batches(session, study_id, after=after, limit=limit + 1)
    page = [BatchPublic.model_validate(b, from_attributes=True) for b in rows[:limit]]
    return BatchList(batches=page, next_after=page[-1].index if len(rows) > limit else None)


@router.get("/batches/{index}")
def get_batch(study_id: StudyId, owner: WorkerDep, session: ReadSessionDep,
              index: Annotated[int, Path(ge=0, le=2**31 - 1)]) -> BatchDetail:
    """One batch with its dictionary: the candidates whose embedding its posterior used (the
    dictionary history, batch by batch)."""
    study = owned(session, study_id, owner)
    batch = queries.batch(session, study_id, index)
    if batch is None:
        raise NotFound(f"batch {index} not found in study {study_id}", field="index")
    atoms = sorted(int(a) for a in from_bytes(batch.dictionary))
    decode = studies.ParameterDecoder(session, study)
    decode.prefetch(atoms)
    return BatchDetail(**BatchPublic.model_validate(batch, from_attributes=True).model_dump(),
                       dictionary=atoms, dictionary_parameters=[decode(a) for a in atoms])


@router.get("/best")
def get_best(study_id: StudyId, owner: WorkerDep, session: ReadSessionDep) -> TrialPublic | None:
    """The best completed trial, or null while there is none."""
    study = owned(session, study_id, owner)
    best = queries.best_trial(session, study_id, study.spec["direction"] == "maximize")
    if best is None:
        return None
    return studies.trial_public(best, studies.ParameterDecoder(session, study)(best.candidate))
