"""Creating studies and presenting them: candidate sets, specs, public views."""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Iterable
from tokenize import TokenError
from typing import Any

import numpy as np
import numpy.lib.format as npy_format
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .api.schemas import StudyCreate, StudyPublic, TrialPublic
from .engine import EngineConfig, EngineError, as_candidates, check_dimension
from .engine.config import LAM_RANGE
from .errors import Conflict, Invalid
from .objectives import check_fits, check_objective
from .runtime import row_decoder
from .searchspace import SearchSpace
from .store import queries
from .store.models import Batch, Study, Trial

#: The engine settings that are booleans (any other may not be one in a new study).
_BOOLEAN_KEYS = frozenset(f.name for f in dataclasses.fields(EngineConfig)
                          if "bool" in str(f.type).split(" | "))


def engine_invalid(exc: EngineError) -> Invalid:
    """A 422 for an engine config the engine refused, its field under ``engine``."""
    return Invalid(str(exc), field=f"engine.{exc.field}" if exc.field else "engine")


def build_spec(request: StudyCreate, dim: int | None, objective_modules: tuple[str, ...]
               ) -> dict[str, Any]:
    """The stored study spec; the engine config and the objective (against the modules
    import paths may come from) are validated here (errors name the field)."""
    for key, value in request.engine.items():  # a bool is an int to Python (and the engine,
        if isinstance(value, bool) and key not in _BOOLEAN_KEYS:  # which loads specs stored
            raise Invalid(f"engine.{key} must be a number, not {value!r}",  # with one)
                          field=f"engine.{key}")
    try:
        config = EngineConfig.from_dict(request.engine)
    except EngineError as exc:
        raise engine_invalid(exc) from exc
    low, high = LAM_RANGE
    if not low <= config.lam <= high:
        raise Invalid(f"lam must lie in [{low:g}, {high:g}]; got {config.lam!r}",
                      field="engine.lam")
    if request.search_space is not None:
        parameters: dict[str, Any] = {
            "kind": "space", "space": [p.model_dump() for p in request.search_space]}
    else:
        names = request.parameter_names
        if names is not None and dim is not None and len(names) != dim:
            raise Invalid(f"{len(names)} parameter names for {dim} columns",
                          field="parameter_names")
        parameters = {"kind": "matrix", "names": names}
    if request.objective is not None:
        check_objective(request.objective, objective_modules, new=True)
    return {"direction": request.direction, "engine": config.to_dict(),
            "parameters": parameters, "objective": request.objective,
            "max_attempts": request.max_attempts, "lease_seconds": request.lease_seconds}


def candidates_of(request: StudyCreate, seed: int) -> np.ndarray | None:
    """The candidate matrix from the request (None when it will be uploaded)."""
    if request.search_space is not None:
        space = SearchSpace(parameters=request.search_space)
        return space.candidates(int(request.n_candidates or 0), seed)
    if request.candidates is None:
        return None
    try:
        return as_candidates(request.candidates)
    except EngineError as exc:
        raise Invalid(str(exc), field="candidates") from exc


def read_npy(data: bytes) -> np.ndarray:
    """The candidate matrix of an uploaded .npy body; its header is checked against the body's
    length first (np.load allocates the declared shape before reading)."""
    if data[:2] == b"PK":  # np.load would open an .npz archive
        raise Invalid("expected one .npy array, got an .npz archive", field="body")
    try:
        buffer = io.BytesIO(data)
        version = npy_format.read_magic(buffer)
        shape, _, dtype = (npy_format.read_array_header_1_0 if version == (1, 0)
                           else npy_format.read_array_header_2_0)(buffer)
        if dtype.hasobject:  # pickled Python objects: their size says nothing, never loaded
            raise Invalid("candidates must be real numbers, got an object array (pickled "
                          "Python objects); save a float array", field="body")
        declared = math.prod(shape) * dtype.itemsize
        if declared != len(data) - buffer.tell():  # short (np.load fails late) or trailing junk
            raise ValueError(f"its header declares shape {shape} of {dtype} ({declared} bytes) "
                             f"but the body holds {len(data) - buffer.tell()} bytes of data")
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError, SyntaxError, TokenError) as exc:
        raise Invalid(f"not a readable .npy file: {exc}", field="body") from exc
    if not np.issubdtype(array.dtype, np.number) or np.iscomplexobj(array):
        raise Invalid(f"candidates must be real numbers, got dtype {array.dtype}", field="body")
    try:
        return as_candidates(array)
    except EngineError as exc:
        raise Invalid(str(exc), field="body") from exc


def create(session: Session, owner_id: int, request: StudyCreate,
           candidates: np.ndarray | None, spec: dict[str, Any]) -> Study:
    study = Study(owner_id=owner_id, name=request.name, spec=spec,
                  status="active" if candidates is not None else "awaiting_candidates",
                  version=0, n_candidates=0 if candidates is None else len(candidates),
                  dim=0 if candidates is None else candidates.shape[1])
    session.add(study)
    try:
        session.flush()
    except IntegrityError as exc:
        raise Conflict(f"a study named {request.name!r} already exists", field="name") from exc
    if candidates is not None:
        attach_candidates(session, study, candidates)
    return study


def attach_candidates(session: Session, study: Study, candidates: np.ndarray) -> None:
    names = study.spec["parameters"].get("names")
    if names is not None and len(names) != candidates.shape[1]:
        raise Invalid(f"{len(names)} parameter names for {candidates.shape[1]} columns",
                      field="parameter_names")
    try:
        check_dimension(EngineConfig.from_dict(study.spec["engine"]), candidates.shape[1])
    except EngineError as exc:
        raise engine_invalid(exc) from exc
    for objective in {study.spec.get("objective"), (study.dispatch or {}).get("objective")}:
        if objective:  # (a dispatch may have been started before the upload)
            check_fits(objective, *candidates.shape)
    queries.save_candidates(session, study.id, candidates)
    study.n_candidates, study.dim, study.status = len(candidates), candidates.shape[1], "active"


def parameter_names(spec: dict[str, Any], dim: int) -> list[str]:
    space = spec["parameters"]
    if space["kind"] == "space":
        return [p["name"] for p in space["space"]]
    return space["names"] or [f"x{i}" for i in range(dim)]


def trial_public(trial: Trial, parameters: dict[str, Any]) -> TrialPublic:
    return TrialPublic(id=trial.id, t=trial.t, candidate=trial.candidate, parameters=parameters,
                       batch=trial.batch, kind=trial.kind, status=trial.status,
                       value=trial.value, attempt=trial.attempt, worker_id=trial.worker_id,
                       lease_expires_at=trial.lease_expires_at, created_at=trial.created_at,
                       completed_at=trial.completed_at, error=trial.error)


class ParameterDecoder:
    """Named parameters of candidates: from ``candidates`` when the caller holds the matrix
    (:meth:`service.runtime.Runtimes.candidates`), else reading only their rows from the stored
    blocks (:func:`service.store.queries.candidate_rows`), each row at most once."""

    def __init__(self, session: Session, study: Study, candidates: np.ndarray | None = None):
        self._session, self._study, self._candidates = session, study, candidates
        self._rows: dict[int, np.ndarray] = {}
        self._decode = row_decoder(study.spec)

    def prefetch(self, candidates: Iterable[int]) -> None:
        """Read the rows of ``candidates`` not held yet, in one pass over their blocks."""
        if self._candidates is not None:
            return
        missing = sorted(set(candidates) - self._rows.keys())
        if missing:
            self._rows.update(zip(missing, queries.candidate_rows(
                self._session, self._study.id, missing), strict=True))

    def __call__(self, candidate: int) -> dict[str, Any]:
        if self._candidates is not None:
            return self._decode(self._candidates[candidate])
        self.prefetch([candidate])
        return self._decode(self._rows[candidate])


def study_public(session: Session, study: Study, decode: ParameterDecoder) -> StudyPublic:
    maximize = study.spec["direction"] == "maximize"
    best = queries.best_trial(session, study.id, maximize)
    latest: Batch | None = queries.latest_batch(session, study.id)
    counts = queries.status_counts(session, study.id)
    engine = study.spec["engine"]
    return StudyPublic(
        id=study.id, name=study.name, status=study.status, direction=study.spec["direction"],
        strategy=engine["strategy"], mode=engine["mode"], n_candidates=study.n_candidates,
        dim=study.dim, parameter_names=parameter_names(study.spec, study.dim),
        n_trials=sum(counts.values()), counts=counts,
        n_batches=0 if latest is None else latest.index + 1,
        dictionary_size=0 if latest is None else latest.dictionary_size,
        hyperparameters=None if latest is None else latest.hyperparameters,
        best=None if best is None else trial_public(best, decode(best.candidate)),
        created_at=study.created_at, spec=study.spec)
