"""batch refit seconds

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 15:00:00.000000

The time of each batch's kernel hyper-parameter refit (NULL at batches without one, and for
older batches): open_seconds minus it is the paper's resparsification step (resampling,
embeddings, variances and means).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.add_column(sa.Column('refit_seconds', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('batches', schema=None) as batch_op:
        batch_op.drop_column('refit_seconds')
