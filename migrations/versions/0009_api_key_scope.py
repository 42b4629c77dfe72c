"""api key scope

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29 19:30:00.000000

What an API key may do: ``owner`` (every key made before, the default) or ``worker`` (read,
and ask for, heartbeat and report trials; no study created, paused, deleted or dispatched).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('scope', sa.String(length=16), nullable=False,
                                      server_default='owner'))


def downgrade() -> None:
    # a worker key would become an owner key: revoke those first, rather than widen them (at
    # the time in UTC, as the column holds it: PostgreSQL's CURRENT_TIMESTAMP is its zone's)
    postgres = op.get_context().dialect.name == "postgresql"
    now = "timezone('UTC', now())" if postgres else "CURRENT_TIMESTAMP"
    op.execute(f"UPDATE api_keys SET revoked_at = {now} "
               "WHERE scope <> 'owner' AND revoked_at IS NULL")
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_column('scope')
