"""pin the value scaling of existing studies

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 06:00:00.000000

The engine now maps the observed values into [0, 1] before its model sees them
(``EngineConfig.normalize_values``, default "unit"). Studies created before ran on the values as
given: their engine configs get ``"normalize_values": "none"``, so that they go on as they
started and a restart rebuilds exactly what they proposed. GSSBO and GO-UCB studies get the
default instead (they standardise their values themselves, and refuse any other setting). The
downgrade removes the key, which older code refuses as unknown.
"""

from __future__ import annotations

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


def _set_engine_key(add: bool) -> None:
    """Each study's engine config with ``normalize_values`` set where it has none (``add``), or
    without it (downgrade)."""
    if context.is_offline_mode():  # `--sql` prints SQL: there are no rows to read
        op.execute("-- 0007 rewrites each study's engine config (normalize_values): run this "
                   "revision online (bbkb migrate) on a database that holds studies")
        return
    bind = op.get_bind()
    for study_id, spec in bind.execute(sa.select(_studies.c.id, _studies.c.spec)).all():
        engine = dict((spec or {}).get("engine") or {})
        if not add:
            if engine.pop("normalize_values", None) is None:
                continue
        elif "normalize_values" in engine or not spec:
            continue
        else:
            engine["normalize_values"] = ("unit" if engine.get("strategy") in _OWN_MODELS
                                          else "none")
        bind.execute(_studies.update().where(_studies.c.id == study_id)
                     .values(spec={**spec, "engine": engine}))


def upgrade() -> None:
    _set_engine_key(add=True)


def downgrade() -> None:
    _set_engine_key(add=False)
