"""batch hyperparameters

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 13:50:00.000000

The kernel hyper-parameters each batch used (issue 8), so that a restart installs them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.add_column(sa.Column('hyperparameters', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.drop_column('hyperparameters')
