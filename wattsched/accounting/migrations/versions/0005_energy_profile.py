"""Each job's mean CPU frequency (sacct AveCPUFreq) and the profile it asked for (--profile).

Revision ID: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("ave_cpu_freq_khz", sa.Integer, nullable=True))
    op.add_column("jobs", sa.Column("profile", sa.String(32), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("jobs", "profile")
    op.drop_column("jobs", "ave_cpu_freq_khz")
