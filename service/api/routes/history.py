"""Read-only views for the dashboard: a summary row per study and a study's columnar history."""

from __future__ import annotations

from typing import Annotated

import numpy as np
from fastapi import APIRouter, Query, Request

from ...store import queries
from ...store.models import Study
from ...ui.optimum import noiseless_values
from ..deps import AfterId, PageSize, ReadSessionDep, SettingsDep, StudyId, WorkerDep
from ..schemas import StudyHistory, StudySummary, SummaryList
from .studies import owned

router = APIRouter(prefix="/v1", tags=["dashboard"])

#: Studies whose noiseless objective values are kept in memory (one float per candidate each).
VALUES_CACHE_SIZE = 16

#: Completed trials a page of the history holds by default (about 3 MB of JSON) and at most.
HISTORY_PAGE = 50_000
HISTORY_PAGE_MAX = 200_000


@router.get("/summaries")
def list_summaries(owner: WorkerDep, session: ReadSessionDep, settings: SettingsDep,
                   after: AfterId = 0, limit: PageSize = 100) -> SummaryList:
    """The caller's studies with counts, best value and last activity, a page at a time as in
    ``GET /v1/studies`` (a few index lookups per study)."""
    limit = min(limit, settings.page_limit)
    rows = []
    page = queries.study_summaries(session, owner, after=after, limit=limit)
    for study, n, completed, failed, best in page:
        engine = study.spec["engine"]
        rows.append(StudySummary(
            id=study.id, name=study.name, status=study.status,
            direction=study.spec["direction"], strategy=engine["strategy"], mode=engine["mode"],
            n_trials=n, completed=completed, failed=failed, best_value=best,
            created_at=study.created_at, last_activity=study.updated_at))
    return SummaryList(studies=rows, next_after=rows[-1].id if len(rows) == limit else None)


@router.get("/studies/{study_id}/history")
def get_history(study_id: StudyId, owner: WorkerDep, session: ReadSessionDep, request: Request,
                offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
                limit: Annotated[int, Query(ge=1, le=HISTORY_PAGE_MAX)] = HISTORY_PAGE,
                ) -> StudyHistory:
    """At most ``limit`` completed trials as columns in completion order from ``offset`` on,
    with f where known (one more row is read to tell whether a next page exists)."""
    study = owned(session, study_id, owner)
    rows = queries.completed_columns(session, study_id, offset, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    t, arms, value, done = (list(c) for c in zip(*rows, strict=True)) if rows else ([],) * 4
    start = study.created_at
    history = StudyHistory(offset=offset, next_offset=offset + limit if more else None,
                           t=t, value=value, elapsed=[(d - start).total_seconds() for d in done])
    values = _noiseless(request, session, study)
    if values is not None:
        history.noiseless = values[np.asarray(arms, dtype=np.int64)].tolist()
        history.optimum = float(values.max() if study.spec["direction"] == "maximize"
                                else values.min())
    return history


def _noiseless(request: Request, session, study: Study) -> np.ndarray | None:  # type: ignore[no-untyped-def]
    """f at every candidate, computed once per study and process (candidates never change)."""
    cache: dict | None = getattr(request.app.state, "noiseless_values", None)
    if cache is None:
        cache = request.app.state.noiseless_values = {}
    key = (study.id, study.spec.get("objective"), study.n_candidates)
    if key not in cache:
        if len(cache) >= VALUES_CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = noiseless_values(key[1], study.n_candidates, study.dim,
                                      lambda: queries.load_candidates(session, study.id))
    return cache[key]
