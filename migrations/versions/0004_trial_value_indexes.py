"""trial indexes for the best trial and the completion history

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 14:25:00.000000

Best trial (max / min of value among completed trials) and the dashboard's history (completed
trials in completion order) read an index range instead of sorting every completed trial.
"""

from __future__ import annotations

from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_trials_study_status_value', 'trials', ['study_id', 'status', 'value', 't'])
    op.create_index('ix_trials_study_status_completed', 'trials',
                    ['study_id', 'status', 'completed_at', 't'])


def downgrade() -> None:
    op.drop_index('ix_trials_study_status_completed', table_name='trials')
    op.drop_index('ix_trials_study_status_value', table_name='trials')
