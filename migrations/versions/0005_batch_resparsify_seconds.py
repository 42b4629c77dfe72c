"""batch resparsify seconds

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 19:00:00.000000

The time of each batch's dictionary resampling alone (issue 7's "time per resparsification");
open_seconds also holds the kernel refit and the posterior build. NULL for older batches.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.add_column(sa.Column('resparsify_seconds', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.drop_column('resparsify_seconds')
