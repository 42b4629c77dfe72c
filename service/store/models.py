"""SQLAlchemy 2 models: the database is the truth for studies, trials, batches and dictionaries.

Arrays (candidate blocks, dictionaries) are stored as raw little-endian ``.npy`` bytes so that
PostgreSQL and SQLite hold byte-identical data (see :mod:`service.store.arrays`).
Infinity is not portable across databases, and the engine refuses non-finite values, so ``value``
columns only ever hold finite floats or NULL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Naive UTC in the database (portable), timezone-aware UTC in Python."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: object) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    pass


class Owner(Base):
    __tablename__ = "owners"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    """A bearer key, stored as the SHA-256 of a 256-bit random token (never the token)."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    #: What the key may do (service.auth.SCOPES): ``owner`` everything, ``worker`` read and
    #: ask for, heartbeat and report trials only.
    scope: Mapped[str] = mapped_column(String(16), default="owner", server_default="owner")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Study(Base):
    __tablename__ = "studies"
    __table_args__ = (UniqueConstraint("owner_id", "name", name="uq_studies_owner_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    #: StudySpec as JSON: engine config, direction, parameters, objective, leases.
    spec: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), default="active")
    #: Server-side evaluation through Redis: {"status": running|paused|done, "parallelism",
    #: "n_evaluations"}; NULL when the study is driven by its callers.
    dispatch: Mapped[dict | None] = mapped_column(JSON)
    #: Incremented on every change (optimistic concurrency between server processes).
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    n_candidates: Mapped[int] = mapped_column(Integer)
    dim: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    @property
    def dispatching(self) -> bool:
        """Whether its dispatch hands out trials (see :func:`dispatching`)."""
        return dispatching(self.status, self.dispatch)


def dispatching(status: str, plan: dict[str, Any] | None) -> bool:
    """Whether a study of this status and dispatch plan dispatches: active, its plan running
    (a paused study's dispatch stays ``running`` but hands out nothing)."""
    return status == "active" and (plan or {}).get("status") == "running"


class CandidateBlock(Base):
    """Rows [index * block_rows, ...) of the study's A x d candidate matrix, as .npy bytes."""

    __tablename__ = "candidate_blocks"

    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"),
                                          primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Batch(Base):
    """One BBKB batch and the dictionary it used (persisted at every resparsification)."""

    __tablename__ = "batches"

    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"),
                                          primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    start_t: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(Integer, default=0)
    stop_reason: Mapped[str | None] = mapped_column(String(20))
    dictionary: Mapped[bytes] = mapped_column(LargeBinary)
    dictionary_size: Mapped[int] = mapped_column(Integer)
    embedding_dim: Mapped[int] = mapped_column(Integer)
    #: The kernel hyper-parameters the batch used (engine KernelState: lengthscale, lam, fitted
    #: variance and noise, fitted_at); a restart installs them instead of refitting. NULL for
    #: batches stored before revision 0003 (their config's fixed kernel).
    hyperparameters: Mapped[dict | None] = mapped_column(JSON)
    #: Opening the batch: dictionary sampling + kernel refit + posterior build.
    open_seconds: Mapped[float | None] = mapped_column(Float)
    #: The dictionary resampling alone (NULL: no dictionary, or stored before revision 0005).
    resparsify_seconds: Mapped[float | None] = mapped_column(Float)
    #: The kernel hyper-parameter refit (NULL: none at this batch, or stored before 0008).
    refit_seconds: Mapped[float | None] = mapped_column(Float)
    opened_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Trial(Base):
    """One evaluation of one candidate; t is the engine's record index (dense per study)."""

    __tablename__ = "trials"
    __table_args__ = (
        UniqueConstraint("study_id", "t", name="uq_trials_study_t"),
        Index("ix_trials_study_status_t", "study_id", "status", "t"),
        Index("ix_trials_status_lease", "status", "lease_expires_at"),
        Index("ix_trials_study_worker", "study_id", "worker_id", "status"),
        Index("ix_trials_study_status_value", "study_id", "status", "value", "t"),
        Index("ix_trials_study_status_completed", "study_id", "status", "completed_at", "t"),
        # the trial list's filters (keyset pages in t order, service.store.queries.trial_page)
        Index("ix_trials_study_worker_t", "study_id", "worker_id", "t"),
        Index("ix_trials_study_batch_t", "study_id", "batch", "t"),
        Index("ix_trials_study_kind_t", "study_id", "kind", "t"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"),
                                    primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"))
    t: Mapped[int] = mapped_column(BigInteger)
    candidate: Mapped[int] = mapped_column(BigInteger)
    batch: Mapped[int] = mapped_column(Integer)
    #: "suggested" by the engine or "imported" (warm start).
    kind: Mapped[str] = mapped_column(String(10))
    #: pending (waiting for a worker), running (leased; a dispatched trial whose job is still
    #: queued has no lease yet), completed, failed, abandoned.
    status: Mapped[str] = mapped_column(String(10))
    value: Mapped[float | None] = mapped_column(Float)
    #: Batch at whose opening the outcome entered the model (-1: not yet). Engine state.
    folded: Mapped[int] = mapped_column(Integer, default=-1)
    #: sigma~^2 of the candidate at the start of its batch (BBKB Theorem 2). Engine state.
    var_start: Mapped[float] = mapped_column(Float)
    attempt: Mapped[int] = mapped_column(SmallInteger, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)
