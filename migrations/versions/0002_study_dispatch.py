"""study dispatch

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 11:40:56.752835
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Generated from service.store.models by `alembic revision --autogenerate`.
    with op.batch_alter_table('studies', schema=None) as batch_op:
        batch_op.add_column(sa.Column('dispatch', sa.JSON(), nullable=True))



def downgrade() -> None:
    # Generated from service.store.models by `alembic revision --autogenerate`.
    with op.batch_alter_table('studies', schema=None) as batch_op:
        batch_op.drop_column('dispatch')

