"""The queries the service needs, in one place (the health check and the dispatch status
count are the only SQL written in handlers).

Engine state is rebuilt from rows: trial columns in t order plus the latest batch's dictionary
(see service.engine.strategy.EngineState). Values are stored as the user gave them; the sign for
minimisation is applied by the runtime.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from typing import Any

import numpy as np
from numpy.lib import format as npy_format
from sqlalchemy import (
    Integer,
    LargeBinary,
    Select,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.orm import Session, defer
from sqlalchemy.orm.attributes import set_committed_value

from ..engine import ABANDONED, IMPORTED, OBSERVED, PENDING, SUGGESTED, EngineState
from .arrays import BLOCK_ROWS, from_bytes, join_rows, split_rows, to_bytes
from .models import Batch, CandidateBlock, Study, Trial, dispatching

ENGINE_STATUS = {"pending": PENDING, "running": PENDING, "completed": OBSERVED,
                 "failed": ABANDONED, "abandoned": ABANDONED}
ENGINE_KIND = {"suggested": SUGGESTED, "imported": IMPORTED}


# The request path's statements are built once (compiled once, no expression rebuilt per
# request). The updates are Core updates of the tables: no ORM session synchronisation (a batch
# row is never loaded in the session; bump_version keeps the loaded study in step).
_studies, _batches, _trials = Study.__table__, Batch.__table__, Trial.__table__
_BUMP_VERSION = update(_studies).where(_studies.c.id == bindparam("s_id")).values(
    version=bindparam("s_version"),
    updated_at=bindparam("s_updated", type_=_studies.c.updated_at.type))
_BATCH_PROGRESS = (update(_batches)
                   .where(_batches.c.study_id == bindparam("b_study"),
                          _batches.c.index == bindparam("b_index"))
                   .values(size=bindparam("b_size"), stop_reason=bindparam("b_reason"),
                           closed_at=func.coalesce(_batches.c.closed_at, bindparam(
                               "b_closed", type_=_batches.c.closed_at.type))))
_FOLD_RUN = update(_trials).where(
    _trials.c.study_id == bindparam("f_study"),
    _trials.c.t.between(bindparam("f_first"), bindparam("f_last"))).values(
        folded=bindparam("f_batch"))
_RUNNING_FOR_WORKER = select(Trial).where(
    Trial.study_id == bindparam("study"), Trial.worker_id == bindparam("worker"),
    Trial.status == "running").order_by(Trial.t)
_RUNNING_ON = select(Trial.id, Trial.worker_id).where(
    Trial.study_id == bindparam("study"), Trial.status == "running",
    Trial.worker_id.like(bindparam("prefix"))).order_by(Trial.t)
_NOT_COMPLETED = select(Trial.status, func.count()).where(
    Trial.study_id == bindparam("study"),
    Trial.status.in_([s for s in ENGINE_STATUS if s != "completed"])).group_by(Trial.status)
_LAST_T = select(func.max(Trial.t)).where(Trial.study_id == bindparam("study"))
_REQUEUED = select(Trial).where(Trial.study_id == bindparam("study"),
                                Trial.status == "pending").order_by(Trial.t).limit(
                                    bindparam("limit"))
_COMPLETED_VALUE = (Trial.study_id == bindparam("study"), Trial.status == "completed")
_BEST_MAX = select(func.max(Trial.value)).where(*_COMPLETED_VALUE)
_BEST_MIN = select(func.min(Trial.value)).where(*_COMPLETED_VALUE)
_BEST_ROW = select(Trial).where(*_COMPLETED_VALUE, Trial.value == bindparam("value")).order_by(
    Trial.t).limit(1)


def bump_version(session: Session, study: Study, now: datetime) -> int:
    """Record that the study changed (version + 1) and return the new version; the loaded
    ``study`` is kept in step without being marked dirty (no ORM flush of it)."""
    version = study.version + 1
    session.execute(_BUMP_VERSION, {"s_id": study.id, "s_version": version, "s_updated": now})
    set_committed_value(study, "version", version)
    set_committed_value(study, "updated_at", now)
    return version


def save_candidates(session: Session, study_id: int, candidates: np.ndarray) -> None:
    session.execute(insert(CandidateBlock), [
        {"study_id": study_id, "index": i, "data": data}
        for i, data in enumerate(split_rows(candidates))])


def load_candidates(session: Session, study_id: int) -> np.ndarray:
    blocks = session.scalars(select(CandidateBlock.data).where(
        CandidateBlock.study_id == study_id).order_by(CandidateBlock.index)).all()
    return join_rows(list(blocks))


def candidate_rows(session: Session, study_id: int, rows: Sequence[int]) -> np.ndarray:
    """Rows ``rows`` (any order) of the study's candidate matrix, reading only their bytes in the
    stored blocks (a block is BLOCK_ROWS rows, 26 MB at d = 50): each block visited once, its
    .npy header then one slice per row (SQLite: incremental blob I/O; elsewhere SQL substr,
    which PostgreSQL serves from the TOAST chunks holding the slice)."""
    rows = np.asarray(rows, dtype=np.int64)
    slices = _sqlite_slices if session.get_bind().dialect.name == "sqlite" else _sql_slices
    found: dict[int, np.ndarray] = {}
    for block in np.unique(rows // BLOCK_ROWS):
        with slices(session, study_id, int(block)) as read:
            offset, dtype, width = _npy_layout(read(0, NPY_PREFIX))
            size = width * dtype.itemsize
            for row in rows[rows // BLOCK_ROWS == block]:
                data = read(offset + int(row % BLOCK_ROWS) * size, size)
                if len(data) != size:
                    raise LookupError(f"study {study_id} has no candidate {row}")
                found[int(row)] = np.frombuffer(data, dtype=dtype)
    if not found:
        return np.zeros((0, 0))
    return np.array([found[int(r)] for r in rows], dtype=np.float64)


#: Bytes read to parse a stored block's .npy header (np.save pads it to 128 at d = 50).
NPY_PREFIX = 4096
_BLOCK_KEY = (CandidateBlock.study_id == bindparam("study"),
              CandidateBlock.index == bindparam("block"))
_BLOCK_ROWID = select(literal_column("rowid")).select_from(CandidateBlock).where(*_BLOCK_KEY)
_BLOCK_SLICE = select(func.substr(CandidateBlock.data, bindparam("start", type_=Integer),
                                  bindparam("length", type_=Integer),
                                  type_=LargeBinary)).where(*_BLOCK_KEY)


def _npy_layout(prefix: bytes) -> tuple[int, np.dtype, int]:
    """(data offset, dtype, row width) of a stored 2-D C-order .npy block from its first bytes."""
    stream = io.BytesIO(prefix)
    version = npy_format.read_magic(stream)
    read_header = (npy_format.read_array_header_1_0 if version == (1, 0)
                   else npy_format.read_array_header_2_0)
    shape, fortran, dtype = read_header(stream)
    if fortran or len(shape) != 2:
        raise ValueError(f"a candidate block is a 2-D C-order array, not {shape}")
    return stream.tell(), dtype, int(shape[1])


@contextmanager
def _sqlite_slices(session: Session, study_id: int,
                   block: int) -> Iterator[Callable[[int, int], bytes]]:
    rowid = session.scalar(_BLOCK_ROWID, {"study": study_id, "block": block})
    if rowid is None:
        raise LookupError(f"study {study_id} has no candidate block {block}")
    driver = session.connection().connection.driver_connection
    with driver.blobopen("candidate_blocks", "data", rowid, readonly=True) as blob:
        def read(start: int, length: int) -> bytes:
            blob.seek(min(start, len(blob)))
            return blob.read(length)
        yield read


@contextmanager
def _sql_slices(session: Session, study_id: int,
                block: int) -> Iterator[Callable[[int, int], bytes]]:
    def read(start: int, length: int) -> bytes:
        data = session.scalar(_BLOCK_SLICE, {"study": study_id, "block": block,
                                             "start": start + 1, "length": length})
        if data is None:
            raise LookupError(f"study {study_id} has no candidate block {block}")
        return bytes(data)
    yield read


_RECORD_COLUMNS = (Trial.t, Trial.candidate, Trial.batch, Trial.kind, Trial.status, Trial.value,
                   Trial.folded, Trial.var_start)


def _records(rows: Sequence[Any], sign: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Trial rows (columns of _RECORD_COLUMNS) as t and the engine's record columns."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * 8
    status = np.array([ENGINE_STATUS[s] for s in cols[4]], dtype=np.int8)
    value = np.array([math.nan if v is None else sign * v for v in cols[5]], dtype=np.float64)
    value[status != OBSERVED] = math.nan
    return np.asarray(cols[0], dtype=np.int64), {
        "arm": np.asarray(cols[1], dtype=np.int64), "batch": np.asarray(cols[2], dtype=np.int64),
        "kind": np.array([ENGINE_KIND[k] for k in cols[3]], dtype=np.int8), "status": status,
        "value": value, "folded": np.asarray(cols[6], dtype=np.int64),
        "var_start": np.asarray(cols[7], dtype=np.float64),
    }


def load_engine_state(session: Session, study_id: int, sign: float) -> EngineState:
    """Trials (t order) and the latest batch as the engine's EngineState."""
    rows = session.execute(select(*_RECORD_COLUMNS).where(Trial.study_id == study_id)
                           .order_by(Trial.t)).all()
    t, records = _records(rows, sign)
    if not np.array_equal(t, np.arange(len(rows))):
        raise RuntimeError(f"study {study_id}: trial sequence numbers are not dense")
    latest = session.scalars(select(Batch).where(Batch.study_id == study_id)
                             .order_by(Batch.index.desc()).limit(1)).first()
    if latest is None:
        return EngineState(-1, 0, np.zeros(0, dtype=np.int64), records)
    return EngineState(latest.index, latest.start_t, from_bytes(latest.dictionary), records,
                       latest.hyperparameters)


def load_records_since(session: Session, study_id: int, sign: float, n: int,
                       pending: np.ndarray) -> tuple[int, np.ndarray, dict[str, np.ndarray]]:
    """What a cached engine with ``n`` records and these ``pending`` ones needs to catch up
    (:meth:`Strategy.catch_up`): the latest batch index and the records t >= n or in
    ``pending``, in t order (index ranges on (study, t): O(changes), not O(trials))."""
    latest = session.scalar(select(func.max(Batch.index)).where(Batch.study_id == study_id))
    wanted = Trial.t >= n
    if len(pending) > 1000:  # a long IN list costs more than the range from the first one
        wanted = Trial.t >= int(pending[0])
    elif len(pending):
        wanted = wanted | Trial.t.in_([int(x) for x in pending])
    rows = session.execute(select(*_RECORD_COLUMNS).where(Trial.study_id == study_id, wanted)
                           .order_by(Trial.t)).all()
    return (-1 if latest is None else int(latest)), *_records(rows, sign)


def insert_trials(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(Trial.__table__), list(rows))


def fold_outcomes(session: Session, study_id: int, t: np.ndarray, batch: np.ndarray) -> None:
    """Mirror the engine: the outcomes of records ``t`` (increasing) entered the model at
    ``batch`` (per record). One indexed range update per run of consecutive t with one batch:
    O(outcomes folded), never a scan of the study's trials."""
    if not len(t):
        return
    t, batch = np.asarray(t, dtype=np.int64), np.asarray(batch, dtype=np.int64)
    breaks = np.flatnonzero((np.diff(t) != 1) | (np.diff(batch) != 0)) + 1
    first, last = np.r_[0, breaks], np.r_[breaks, len(t)] - 1
    session.execute(_FOLD_RUN, [
        {"f_study": study_id, "f_first": int(t[i]), "f_last": int(t[j]), "f_batch": int(batch[i])}
        for i, j in zip(first, last, strict=True)])


def save_batch(session: Session, study_id: int, info: Any, *, new: bool, now: Any) -> None:
    """Insert a batch the engine just opened (with its dictionary), or update its size/close."""
    closed = now if info.stop_reason is not None else None
    if new:
        session.add(Batch(study_id=study_id, index=info.index, start_t=info.start,
                          size=info.size, stop_reason=info.stop_reason, opened_at=now,
                          closed_at=closed, dictionary=to_bytes(info.dictionary),
                          dictionary_size=info.dictionary_size,
                          embedding_dim=info.embedding_dim,
                          open_seconds=_finite_or_none(info.open_seconds),
                          resparsify_seconds=_finite_or_none(info.resparsify_seconds),
                          refit_seconds=_finite_or_none(info.refit_seconds),
                          hyperparameters=info.hyperparameters))
        return
    session.execute(_BATCH_PROGRESS, {"b_study": study_id, "b_index": info.index,
                                      "b_size": info.size, "b_reason": info.stop_reason,
                                      "b_closed": closed})


def _finite_or_none(seconds: float) -> float | None:
    """A timing as stored: NULL when it was not measured (NaN: restored, or no dictionary)."""
    return seconds if math.isfinite(seconds) else None


def running_for_worker(session: Session, study_id: int, worker_id: str) -> list[Trial]:
    return list(session.scalars(_RUNNING_FOR_WORKER, {"study": study_id, "worker": worker_id}))


def running_on(session: Session, study_id: int, prefix: str) -> list[tuple[int, str]]:
    """(id, worker id) of the study's running trials whose worker id starts with ``prefix``,
    oldest first (an index range over the running trials: few rows)."""
    return [(int(i), str(w)) for i, w in session.execute(
        _RUNNING_ON, {"study": study_id, "prefix": f"{prefix}%"})]


def requeued(session: Session, study_id: int, limit: int) -> list[Trial]:
    """Trials waiting for a worker (returned to the pool after a lost lease or a failure)."""
    return list(session.scalars(_REQUEUED, {"study": study_id, "limit": limit}))


def expired_leases(session: Session, now: Any) -> list[tuple[int, int]]:
    """(study_id, trial id) of running trials whose lease has expired, in studies not deleted
    (a deleted study's trials stay as they were)."""
    return [tuple(r) for r in session.execute(
        select(Trial.study_id, Trial.id).join(Study, Study.id == Trial.study_id).where(
            Trial.status == "running", Trial.lease_expires_at < now,
            Study.status != "deleted"))]


def stranded_queued(session: Session) -> list[tuple[int, int]]:
    """(study_id, trial id) of queued trials (running, no lease yet: dispatched, their job not
    taken) in studies not deleted that no longer dispatch: the study is not active or its
    dispatch not running (see trials.release_queued)."""
    rows = session.execute(
        select(Trial.study_id, Trial.id, Study.status, Study.dispatch)
        .join(Study, Study.id == Trial.study_id)
        .where(Trial.status == "running", Trial.lease_expires_at.is_(None),
               Study.status != "deleted"))
    return [(int(sid), int(tid)) for sid, tid, status, plan in rows
            if not dispatching(status, plan)]


def queued_trials(session: Session, study_id: int) -> list[Trial]:
    """A study's queued trials: running with no lease yet (dispatched, their job not taken)."""
    return list(session.scalars(select(Trial).where(
        Trial.study_id == study_id, Trial.status == "running",
        Trial.lease_expires_at.is_(None))))


def unleased_queued(session: Session, study_id: int, prefix: str,
                    before: datetime) -> list[tuple[int, str]]:
    """(id, worker id) of the study's queued trials (running, no lease yet) dispatched to a
    worker id starting with ``prefix`` before ``before``."""
    return [(int(i), str(w)) for i, w in session.execute(select(Trial.id, Trial.worker_id).where(
        Trial.study_id == study_id, Trial.status == "running",
        Trial.worker_id.like(f"{prefix}%"), Trial.lease_expires_at.is_(None),
        Trial.started_at < before))]


def unfinished_counts(session: Session, study_id: int) -> dict[str, int]:
    """The study's running and pending trials, per status (short index ranges)."""
    return {str(s): int(n) for s, n in session.execute(
        select(Trial.status, func.count()).where(
            Trial.study_id == study_id, Trial.status.in_(("running", "pending")))
        .group_by(Trial.status))}


def suggested_outcomes(session: Session, study_id: int) -> tuple[int, int]:
    """Suggested trials with an outcome (completed, failed or abandoned), and of those the
    completed ones: one O(trials) count."""
    counts = {str(s): int(n) for s, n in session.execute(
        select(Trial.status, func.count()).where(
            Trial.study_id == study_id, Trial.kind == "suggested",
            Trial.status.in_(("completed", "failed", "abandoned"))).group_by(Trial.status))}
    return sum(counts.values()), counts.get("completed", 0)


def distinct_candidates(session: Session, study_id: int) -> int:
    """Candidates the study's trials hold (proposed or imported): O(trials)."""
    return int(session.scalar(select(func.count(func.distinct(Trial.candidate))).where(
        Trial.study_id == study_id)) or 0)


def trial_by_id(session: Session, study_id: int, trial_id: int) -> Trial | None:
    trial = session.get(Trial, trial_id)
    return trial if trial is not None and trial.study_id == study_id else None


def trials_by_ids(session: Session, study_id: int, trial_ids: Sequence[int]) -> dict[int, Trial]:
    """The study's trials among ``trial_ids``, by id (absent ids, or another study's, left out);
    one IN query per 1000 ids."""
    found: dict[int, Trial] = {}
    unique = sorted(set(trial_ids))
    for lo in range(0, len(unique), 1000):
        found.update((t.id, t) for t in session.scalars(select(Trial).where(
            Trial.study_id == study_id, Trial.id.in_(unique[lo:lo + 1000]))))
    return found


def status_counts(session: Session, study_id: int) -> dict[str, int]:
    """Trials per status without visiting the completed ones (the status that grows without
    bound): a study's t are 0..n-1 (the engine's selection index: unique and dense), so n is
    one index lookup and completed = n - the other statuses, which are short index ranges."""
    counts = {s: 0 for s in ENGINE_STATUS}
    counts.update({s: int(n) for s, n in session.execute(_NOT_COMPLETED, {"study": study_id})})
    last = session.scalar(_LAST_T, {"study": study_id})
    n = 0 if last is None else int(last) + 1
    counts["completed"] = n - sum(counts.values())
    return counts


def best_value(session: Session, study_id: int, maximize: bool) -> float | None:
    """The best completed value: one-row min/max on the (study, status, value) index."""
    return session.scalar(_BEST_MAX if maximize else _BEST_MIN, {"study": study_id})


def best_trial(session: Session, study_id: int, maximize: bool) -> Trial | None:
    """The best completed trial (the earliest on ties): two index lookups, no sort."""
    value = best_value(session, study_id, maximize)
    if value is None:
        return None
    return session.scalars(_BEST_ROW, {"study": study_id, "value": value}).first()


#: Trial list filters, each a column with an index on (study_id, column, t) (see models.Trial).
PAGE_FILTERS = ("status", "worker_id", "batch", "kind")


@cache
def page_statement(filters: frozenset[str], descending: bool = False) -> Select[tuple[Trial]]:
    """The keyset page statement for a set of filters and an order (built once per pair): bound
    parameters ``study``, ``after``, ``limit`` and one per filter, named after its column.
    Ascending: t > after in t order; descending: t < after, newest first (the same index
    ranges, read backwards)."""
    query = select(Trial).where(Trial.study_id == bindparam("study"),
                                Trial.t < bindparam("after") if descending
                                else Trial.t > bindparam("after"))
    for name in PAGE_FILTERS:
        if name in filters:
            query = query.where(getattr(Trial, name) == bindparam(name))
    return query.order_by(Trial.t.desc() if descending else Trial.t).limit(bindparam("limit"))


#: ``after`` of a descending page that starts at the newest trial: above every t.
NEWEST = 2**63 - 1


def trial_page(session: Session, study_id: int, *, after: int | None, limit: int,
               status: str | None = None, worker_id: str | None = None,
               batch: int | None = None, kind: str | None = None,
               descending: bool = False) -> list[Trial]:
    """Keyset pagination on (study_id, t), optionally filtered (None: any): O(limit) per page
    whatever the study's size, each filter being an index range in t order.

    Ascending, the trials with t > ``after`` in t order; ``descending``, those with t < ``after``
    newest first. ``after`` None starts at the first trial of the order."""
    given = {name: value for name, value in (("status", status), ("worker_id", worker_id),
                                             ("batch", batch), ("kind", kind))
             if value is not None}
    if after is None:
        after = NEWEST if descending else -1
    return list(session.scalars(page_statement(frozenset(given), descending),
                                {"study": study_id, "after": after, "limit": limit, **given}))


def batches(session: Session, study_id: int, *, after: int = -1,
            limit: int | None = None) -> list[Batch]:
    """At most ``limit`` of the study's batches with index > ``after``, in index order, without
    their dictionaries (loaded on access: 8 bytes per atom, which the batch list does not
    show)."""
    return list(session.scalars(select(Batch).options(defer(Batch.dictionary))
                                .where(Batch.study_id == study_id, Batch.index > after)
                                .order_by(Batch.index).limit(limit)))


def batch(session: Session, study_id: int, index: int) -> Batch | None:
    """One batch of the study, with its dictionary."""
    return session.get(Batch, (study_id, index))


def latest_batch(session: Session, study_id: int) -> Batch | None:
    return session.scalars(select(Batch).where(Batch.study_id == study_id)
                           .order_by(Batch.index.desc()).limit(1)).first()


def latest_batch_closed(session: Session, study_id: int) -> bool:
    """Whether the study's latest batch is closed (False without batches), its row unread."""
    row = session.execute(select(Batch.closed_at).where(Batch.study_id == study_id)
                          .order_by(Batch.index.desc()).limit(1)).first()
    return row is not None and row.closed_at is not None


def dispatching_studies(session: Session) -> list[Study]:
    """Studies with a dispatch plan (running or not: :attr:`Study.dispatching` says)."""
    return list(session.scalars(select(Study).where(Study.dispatch.is_not(None))))


def owned_study_ids(session: Session, owner_id: int, study_ids: set[int]) -> set[int]:
    """Those of ``study_ids`` that ``owner_id`` owns."""
    return set(session.scalars(select(Study.id).where(Study.id.in_(study_ids),
                                                      Study.owner_id == owner_id)))


def studies_of(session: Session, owner_id: int, *, after: int = 0, limit: int | None = None,
               names: Collection[str] | None = None) -> list[Study]:
    """An owner's live studies with id > ``after`` in id order (keyset pagination), at most
    ``limit``, optionally only those called one of ``names`` (the (owner, name) index)."""
    query = select(Study).where(Study.owner_id == owner_id, Study.status != "deleted",
                                Study.id > after)
    if names is not None:
        query = query.where(Study.name.in_(names))
    return list(session.scalars(query.order_by(Study.id).limit(limit)))


def study_summaries(session: Session, owner_id: int, *, after: int = 0,
                    limit: int | None = None) -> list[tuple]:
    """Per study of an owner (a page of :func:`studies_of`): (study, trials, completed, failed,
    best value).

    ``failed`` counts failed and abandoned trials. A few index lookups per study
    (:func:`status_counts`, :func:`best_value`), never a pass over the trials.
    """
    out = []
    for study in studies_of(session, owner_id, after=after, limit=limit):
        counts = status_counts(session, study.id)
        best = best_value(session, study.id, study.spec["direction"] == "maximize")
        out.append((study, sum(counts.values()), counts["completed"],
                    counts["failed"] + counts["abandoned"], best))
    return out


def completed_columns(session: Session, study_id: int, offset: int = 0,
                      limit: int | None = None) -> list[tuple]:
    """(t, candidate, value, completed_at) of at most ``limit`` completed trials in completion
    order, from the ``offset``-th on (completions are stamped under the study's lock, so they
    only append)."""
    return [tuple(r) for r in session.execute(
        select(Trial.t, Trial.candidate, Trial.value, Trial.completed_at)
        .where(Trial.study_id == study_id, Trial.status == "completed")
        .order_by(Trial.completed_at, Trial.t).offset(offset).limit(limit))]
