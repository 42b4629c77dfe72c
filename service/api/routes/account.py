"""The caller's account: its key's owner and scope, and the owner's quotas and their use."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import select

from ... import quotas
from ...store.models import Owner
from ..deps import CallerDep, ReadSessionDep, SettingsDep
from ..schemas import Account

router = APIRouter(prefix="/v1", tags=["account"])


@router.get("/me")
def get_account(caller: CallerDep, session: ReadSessionDep, settings: SettingsDep) -> Account:
    """Who the key is (a script or worker can check its key with it) and how much of the
    owner's quotas its studies and running dispatches use."""
    name = session.scalar(select(Owner.name).where(Owner.id == caller.owner))
    return Account(owner=name if name is not None else f"owner {caller.owner}",
                   scope=caller.scope, studies=quotas.studies_held(session, caller.owner),
                   max_studies=settings.owner_max_studies,
                   parallelism=sum(quotas.running_parallelism(session, caller.owner).values()),
                   max_parallelism=settings.owner_max_parallelism)
