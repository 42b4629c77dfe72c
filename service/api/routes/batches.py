"""Batch history (sizes, stop reasons, dictionary sizes, timings; one batch with its
dictionary) and the best trial."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from ... import studies
from ...errors import NotFound
from ...store import queries
from ...store.arrays import from_bytes
from ..deps import OwnerDep, ReadSessionDep, StudyId
from ..schemas import BatchDetail, BatchList, BatchPublic, TrialPublic
from .studies import owned

router = APIRouter(prefix="/v1/studies/{study_id}", tags=["batches"])


@router.get("/batches")
def list_batches(study_id: StudyId, owner: OwnerDep, session: ReadSessionDep,
                 after: Annotated[int, Query(ge=-1, le=2**31 - 1)] = -1) -> BatchList:
    """The batches in index order, only those with index > ``after`` (a poller asks for the
    ones it has not seen, as with the trials' ``after``; -1: all of them)."""
    owned(session, study_id, owner)
    return BatchList(batches=[BatchPublic.model_validate(b, from_attributes=True)
                              for b in queries.batches(session, study_id, after=after)])


@router.get("/batches/{index}")
def get_batch(study_id: StudyId, owner: OwnerDep, session: ReadSessionDep,
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
def get_best(study_id: StudyId, owner: OwnerDep, session: ReadSessionDep) -> TrialPublic | None:
    """The best completed trial, or null while there is none."""
    study = owned(session, study_id, owner)
    best = queries.best_trial(session, study_id, study.spec["direction"] == "maximize")
    if best is None:
        return None
    return studies.trial_public(best, studies.ParameterDecoder(session, study)(best.candidate))
