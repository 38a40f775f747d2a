"""Jobs' time suspended (scontrol suspend), which sacct shows as Suspended.

Revision ID: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("time_suspended", sa.Double, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("jobs", "time_suspended")
