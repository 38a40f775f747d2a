"""An index on jobs' end time: sacct's windows and the dashboard's energy by user and account select
jobs by when they ended.

Revision ID: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_cluster_time_end", "jobs", ["cluster", "time_end"])


def downgrade() -> None:
    op.drop_index("ix_jobs_cluster_time_end", table_name="jobs")
