"""Batch history (sizes, stop reasons, dictionary sizes, timings) and the best trial."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ... import studies
from ...store import queries
from ..deps import OwnerDep, ReadSessionDep, StudyId
from ..schemas import BatchList, BatchPublic, TrialPublic
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


@router.get("/best")
def get_best(study_id: StudyId, owner: OwnerDep, session: ReadSessionDep) -> TrialPublic | None:
    """The best completed trial, or null while there is none."""
    study = owned(session, study_id, owner)
    best = queries.best_trial(session, study_id, study.spec["direction"] == "maximize")
    if best is None:
        return None
    return studies.trial_public(best, studies.ParameterDecoder(session, study)(best.candidate))
