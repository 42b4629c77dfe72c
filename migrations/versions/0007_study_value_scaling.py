"""pin the value scaling of existing studies

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 06:00:00.000000

The engine now maps the observed values into [0, 1] before its model sees them
(``EngineConfig.normalize_values``, default "unit"). Studies created before ran on the values as
given: their engine configs get ``"normalize_values": "none"``, so that they go on as they
started and a restart rebuilds exactly what they proposed. GSSBO and GO-UCB studies get the
default instead (they standardise their values themselves, and refuse any other setting).

The downgrade removes the key from the engine config, which older code refuses as unknown, and
keeps its value beside it in the study's spec (``downgraded_normalize_values``: older code reads
the spec's keys by name, never writes a spec after creating it, and shows this one only where
it shows the whole spec, a study's GET and the dashboard's configuration). The upgrade puts it
back: a study keeps its value scaling through a downgrade and upgrade, where one made with this
revision used to come back pinned to "none" as if it were older. Trials the older code proposed
meanwhile were chosen on the values as given; a rebuild replays them as they were (a restore
replays recorded selections, whatever the scaling), and from its next batch the study scales
its values as it was created to.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import context, op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

_studies = sa.table("studies", sa.column("id", sa.Integer), sa.column("spec", sa.JSON))
#: Strategies with models of their own (service.engine.config.LITERATURE_STRATEGIES, copied:
#: a migration does not follow later changes of the code).
_OWN_MODELS = ("gssbo", "go-ucb")
#: The spec's key holding a downgraded study's normalize_values until the upgrade restores it.
_KEPT = "downgraded_normalize_values"


def _upgraded(spec: dict) -> dict | None:
    """The spec with ``normalize_values`` in its engine config: the value a downgrade kept, else
    the one of a study from before this revision; None if it needs no change."""
    engine = dict(spec.get("engine") or {})
    if _KEPT in spec:
        engine.setdefault("normalize_values", spec[_KEPT])
    elif "normalize_values" in engine:
        return None
    else:
        engine["normalize_values"] = ("unit" if engine.get("strategy") in _OWN_MODELS
                                      else "none")
    return {**{key: value for key, value in spec.items() if key != _KEPT}, "engine": engine}


def _downgraded(spec: dict) -> dict | None:
    """The spec without ``normalize_values`` in its engine config, its value kept aside (_KEPT);
    None if it needs no change."""
    engine = dict(spec.get("engine") or {})
    if "normalize_values" not in engine:
        return None
    value = engine.pop("normalize_values")
    return {**spec, "engine": engine, _KEPT: value}


def _rewrite(change: Callable[[dict], dict | None]) -> None:
    """Each study's spec as ``change`` makes it (None: left as it is)."""
    if context.is_offline_mode():  # `--sql` prints SQL: there are no rows to read
        op.execute("-- 0007 rewrites each study's engine config (normalize_values): run this "
                   "revision online (bbkb migrate) on a database that holds studies")
        return
    bind = op.get_bind()
    for study_id, spec in bind.execute(sa.select(_studies.c.id, _studies.c.spec)).all():
        changed = change(spec) if spec else None
        if changed is not None:
            bind.execute(_studies.update().where(_studies.c.id == study_id).values(spec=changed))


def upgrade() -> None:
    _rewrite(_upgraded)


def downgrade() -> None:
    _rewrite(_downgraded)
