"""Per-owner quotas: how many studies an owner may hold (``BBKB_OWNER_MAX_STUDIES``) and how
many parallel evaluations its running dispatches may ask of the shared worker pool together
(``BBKB_OWNER_MAX_PARALLELISM``). Unset, neither is limited.

Each check runs under the owner's lock (PostgreSQL: a transaction-level advisory lock in its
own key space; SQLite: the write transaction, BEGIN IMMEDIATE, is serial), so that two requests
of one owner at once cannot both pass on the same count. Locks are taken study first, then
owner, everywhere.
"""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from .errors import Conflict
from .store.models import Study

#: The first key of the owners' advisory locks (the studies' are single bigint keys, which
#: PostgreSQL keeps apart from the (int, int) ones).
_OWNER_LOCKS = 1


def lock_owner(session: Session, owner_id: int) -> None:
    """Serialise the quota checks of one owner across processes until the transaction ends."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:space, :owner)"),
                        {"space": _OWNER_LOCKS, "owner": owner_id})


def studies_held(session: Session, owner_id: int) -> int:
    """The owner's studies, deleted ones aside."""
    return session.scalar(select(func.count()).select_from(Study).where(
        Study.owner_id == owner_id, Study.status != "deleted")) or 0


def running_parallelism(session: Session, owner_id: int,
                        besides: int | None = None) -> dict[int, int]:
    """The parallelism of each of the owner's running dispatches, by study (but ``besides``)."""
    query = select(Study.id, Study.dispatch).where(
        Study.owner_id == owner_id, Study.status != "deleted", Study.dispatch.is_not(None))
    if besides is not None:
        query = query.where(Study.id != besides)
    return {sid: int(plan.get("parallelism", 0)) for sid, plan in session.execute(query)
            if plan and plan.get("status") == "running"}


def check_studies(session: Session, owner_id: int, limit: int | None) -> None:
    """409 if the owner already holds ``limit`` studies (deleted ones do not count)."""
    if limit is None:
        return
    lock_owner(session, owner_id)
    held = studies_held(session, owner_id)
    if held >= limit:
        raise Conflict(f"this owner holds {held} studies, the most BBKB_OWNER_MAX_STUDIES "
                       f"({limit}) allows: delete one to create another")


def check_parallelism(session: Session, study: Study, parallelism: int, limit: int | None, *,
                      resume: bool = False) -> None:
    """409 if ``study``'s dispatch running at ``parallelism`` would take the owner's running
    dispatches (paused ones and the study's own current one aside) past ``limit``; its advice
    for a ``resume`` (which asks for no parallelism) is a new dispatch."""
    if limit is None:
        return
    lock_owner(session, study.owner_id)
    running = running_parallelism(session, study.owner_id, besides=study.id)
    used = sum(running.values())
    if used + parallelism > limit:
        room = max(limit - used, 0)
        raise Conflict(
            f"this owner's running dispatches ({len(running)}, in studies "
            f"{', '.join(map(str, sorted(running)[:5]))}{' ...' if len(running) > 5 else ''}) "
            f"use {used} of the {limit} parallel evaluations BBKB_OWNER_MAX_PARALLELISM allows: "
            + ("pause one first" if not room else
               f"pause one, or start a new dispatch with parallelism <= {room}" if resume else
               f"ask for parallelism <= {room}, or pause one"), field="parallelism")
