"""study names nfc

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29 20:15:00.000000

Study names are stored in Unicode's composed form (NFC) since names typed "é" as one
character or as "e" and a combining accent became one name; a study created before holds the
form it was given. This renames each such study to its NFC form, unless its owner already
has a study of that name (the two stay apart, both found by name: service.api.schemas.
name_forms) or that form is longer than the column (NFC can lengthen a name). The downgrade
keeps the names: they fit every revision's column.
"""

from __future__ import annotations

import unicodedata

import sqlalchemy as sa
from alembic import context, op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

NAME_LENGTH = 200  # studies.name is VARCHAR(200)
studies = sa.table("studies", sa.column("id", sa.Integer), sa.column("owner_id", sa.Integer),
                   sa.column("name", sa.String))


def upgrade() -> None:
    if context.is_offline_mode():  # `--sql` prints SQL: there are no rows to read
        op.execute("-- 0010 composes (NFC) the study names stored before: run this revision "
                   "online (bbkb migrate) on a database that holds studies")
        return
    conn = op.get_bind()
    rows = conn.execute(sa.select(studies.c.id, studies.c.owner_id, studies.c.name)
                        .order_by(studies.c.id)).all()
    taken = {(owner, name) for _, owner, name in rows}
    for study_id, owner, name in rows:
        composed = unicodedata.normalize("NFC", name)
        if composed == name or (owner, composed) in taken or len(composed) > NAME_LENGTH:
            continue  # (NFC can lengthen a name past the column: such a name stays as it is)
        conn.execute(sa.update(studies).where(studies.c.id == study_id).values(name=composed))
        taken.discard((owner, name))
        taken.add((owner, composed))


def downgrade() -> None:
    pass
