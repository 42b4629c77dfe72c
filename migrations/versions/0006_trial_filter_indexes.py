"""trial indexes for the trial list's filters

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 19:10:00.000000

GET /v1/studies/{id}/trials filters by worker_id, batch and kind (status has
ix_trials_study_status_t): each filter is an index range in t order, so a keyset page reads
O(limit) rows instead of sorting the matching trials.
"""

from __future__ import annotations

from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_trials_study_worker_t', 'trials', ['study_id', 'worker_id', 't'])
    op.create_index('ix_trials_study_batch_t', 'trials', ['study_id', 'batch', 't'])
    op.create_index('ix_trials_study_kind_t', 'trials', ['study_id', 'kind', 't'])


def downgrade() -> None:
    op.drop_index('ix_trials_study_kind_t', table_name='trials')
    op.drop_index('ix_trials_study_batch_t', table_name='trials')
    op.drop_index('ix_trials_study_worker_t', table_name='trials')
