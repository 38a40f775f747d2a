"""Each job's CPU frequency: the --cpu-freq it asked for and the kHz the controller chose to fit
a power cap.

Revision ID: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("req_cpu_freq", sa.String(64), nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("cpu_freq_khz", sa.Integer, nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "cpu_freq_khz")
    op.drop_column("jobs", "req_cpu_freq")
