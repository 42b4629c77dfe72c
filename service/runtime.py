"""Study runtime: each study's engine lives in memory, is rebuilt lazily from the database, and
is mutated only inside :meth:`Runtimes.mutate`.

``mutate`` takes a per-study thread lock (requests of one study are serialised around the engine)
and, inside one database transaction, the per-study database lock (advisory lock on PostgreSQL,
the write lock of ``BEGIN IMMEDIATE`` on SQLite). If the study's ``version`` in the database is
not the one the cached engine was built at (another server process changed it), the engine is
rebuilt from the database first. Every change bumps the version and is committed before the
caller answers. Operations validate before they touch the engine, so a client error leaves the
cached engine valid; any other failure drops it, and the next request rebuilds it.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from .engine import BatchInfo, EngineConfig, Strategy
from .errors import Conflict, NotFound, ServiceError
from .searchspace import SearchSpace, decode_matrix_row
from .store import queries
from .store.database import lock_study, transaction
from .store.models import Study, utcnow

T = TypeVar("T")


@dataclass
class StudyRuntime:
    """One study's engine and what is needed to talk about its candidates."""

    study_id: int
    version: int
    spec: dict[str, Any]
    candidates: np.ndarray
    strategy: Strategy

    @property
    def sign(self) -> float:
        return direction_sign(self.spec)

    def parameters(self, candidate: int) -> dict[str, Any]:
        return self._decode(self.candidates[candidate])

    @functools.cached_property
    def _decode(self) -> Callable[[np.ndarray], dict[str, Any]]:
        return row_decoder(self.spec)


def direction_sign(spec: dict[str, Any]) -> float:
    """+1 to maximise, -1 to minimise (the engine always maximises)."""
    return -1.0 if spec["direction"] == "minimize" else 1.0


def row_decoder(spec: dict[str, Any]) -> Callable[[np.ndarray], dict[str, Any]]:
    """The named parameters of a candidate row, for a study's ``spec``; the search space is
    validated once here, not once per row (every trial of a list or export page)."""
    space = spec["parameters"]
    if space["kind"] == "space":
        return SearchSpace(parameters=space["space"]).decode
    names = space["names"]
    return lambda row: decode_matrix_row(names or [f"x{i}" for i in range(len(row))], row)


class Runtimes:
    """Cache of study runtimes with the locking protocol described in the module docstring."""

    def __init__(self, sessions: sessionmaker[Session], capacity: int = 16,
                 on_opened: Callable[[int, list[BatchInfo]], None] | None = None) -> None:
        self._sessions = sessions
        self._capacity = capacity  # engines kept, least recently used evicted
        #: told (study id, batches) of the batches each committed change opened, whoever asked
        #: (a worker, the dispatcher, a dispatch job's next trial)
        self._on_opened = on_opened
        self._cache: OrderedDict[int, StudyRuntime] = OrderedDict()
        self._candidates: dict[int, np.ndarray] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, study_id: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(study_id, threading.Lock())

    def outcomes(self, study_id: int, version: int) -> tuple[int, int] | None:
        """Suggested selections with an outcome, and of those with a value (Strategy.outcomes),
        from the cached engine if it was built at ``version`` (else None). Read without the
        study's lock: a hint, for polling loops that would otherwise count the study's trials
        in the database (O(trials))."""
        strategy = self._cached_at(study_id, version)
        return None if strategy is None else strategy.outcomes()

    def exhausted(self, study_id: int, version: int) -> bool | None:
        """Whether the cached engine, if built at ``version``, has no candidate left to propose
        (``deterministic``); None if this process does not hold it current. A hint, as
        :meth:`resolved`'s."""
        strategy = self._cached_at(study_id, version)
        return None if strategy is None else strategy.exhausted

    def _cached_at(self, study_id: int, version: int) -> Strategy | None:
        """The cached engine of the study if it was built at ``version``, else None."""
        cached = self._cache.get(study_id)
        return None if cached is None or cached.version != version else cached.strategy

    def candidates(self, study_id: int) -> np.ndarray | None:
        """The study's candidate matrix if this process holds it, else None (no database read).
        Read-only: a study's candidates never change once uploaded."""
        return self._candidates.get(study_id)

    def forget(self, study_id: int) -> None:
        self._cache.pop(study_id, None)
        self._candidates.pop(study_id, None)

    def mutate(self, study_id: int, owner_id: int | None,
               change: Callable[[Session, StudyRuntime, Study], T]) -> T:
        """Run ``change`` on the study's current engine and commit it (see module docstring)."""
        with self._lock(study_id):
            try:
                with transaction(self._sessions) as session:
                    lock_study(session, study_id)
                    study = session.get(Study, study_id)
                    if study is None or study.status == "deleted" or (
                            owner_id is not None and study.owner_id != owner_id):
                        raise NotFound(f"study {study_id} not found", field="study_id")
                    if study.status == "awaiting_candidates":
                        raise Conflict(f"study {study_id} has no candidates yet: upload them"
                                       f" with PUT /v1/studies/{study_id}/candidates",
                                       field="study_id")
                    runtime = self._current(session, study)
                    seen = len(runtime.strategy.batches)
                    result = change(session, runtime, study)
                    runtime.version = queries.bump_version(session, study, utcnow())
                opened = runtime.strategy.batches[seen:]
            except ServiceError:
                raise  # raised before the engine was touched: the cache stays valid
            except BaseException:  # engine errors too: one may come from a half-opened batch
                self._cache.pop(study_id, None)
                raise
        if opened and self._on_opened is not None:
            self._on_opened(study_id, opened)
        return result

    def _current(self, session: Session, study: Study) -> StudyRuntime:
        cached = self._cache.get(study.id)
        if cached is not None and (cached.version == study.version or (
                cached.spec == study.spec and self._catch_up(session, cached))):
            cached.version = study.version
            with self._guard:
                if study.id in self._cache:
                    self._cache.move_to_end(study.id)
            return cached
        self._cache.pop(study.id, None)
        runtime = self.load(session, study)
        with self._guard:
            self._cache[study.id] = runtime
            while len(self._cache) > self._capacity:  # its lock holder keeps its own reference
                evicted, _ = self._cache.popitem(last=False)
                self._candidates.pop(evicted, None)
        return runtime

    @staticmethod
    def _catch_up(session: Session, runtime: StudyRuntime) -> bool:
        """Bring an engine another process made stale up to date from the rows it changed
        (its asks, imports and outcomes inside the current batch), instead of a rebuild:
        with several api processes most requests find the study changed by another one, and a
        rebuild reads every trial (1.1 s at 10^5). False: rebuild (a batch was opened, ...)."""
        strategy = runtime.strategy
        batch, t, records = queries.load_records_since(
            session, runtime.study_id, runtime.sign, strategy.t, strategy.pending())
        return strategy.catch_up(t, records, batch)

    def load(self, session: Session, study: Study) -> StudyRuntime:
        """Rebuild the study's engine from the database (exact: same proposals as before)."""
        candidates = self._candidates.get(study.id)
        if candidates is None:
            candidates = queries.load_candidates(session, study.id)
            self._candidates[study.id] = candidates
        config = EngineConfig.from_dict(study.spec["engine"])
        state = queries.load_engine_state(session, study.id, direction_sign(study.spec))
        strategy = Strategy.restore(candidates, config, state)
        return StudyRuntime(study.id, study.version, study.spec, candidates, strategy)
