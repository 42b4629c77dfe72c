"""study names nfc

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29 20:15:00.000000

Study names are stored in Unicode's composed form (NFC) since names typed "é" as one
character or as "e" and a combining accent became one name; a study created before holds the
form it was given. This renames each such study to its NFC form, unless its owner already
has a study of that name (the two stay apart, both found by name: service.api.schemas.
name_forms). The downgrade keeps the names: NFC names are valid names of every revision.
"""

from __future__ import annotations

import unicodedata

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

studies = sa.table("studies", sa.column("id", sa.Integer), sa.column("owner_id", sa.Integer),
                   sa.column("name", sa.String))


def upgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(sa.select(studies.c.id, studies.c.owner_id, studies.c.name)
                        .order_by(studies.c.id)).all()
    taken = {(owner, name) for _, owner, name in rows}
    for study_id, owner, name in rows:
        composed = unicodedata.normalize("NFC", name)
        if composed == name or (owner, composed) in taken:
            continue
        conn.execute(sa.update(studies).where(studies.c.id == study_id).values(name=composed))
        taken.discard((owner, name))
        taken.add((owner, composed))


def downgrade() -> None:
    pass
