"""Jobs' power limits: the lowest the power limits of their nodes held them to (sacct MinCapWatts).

Revision ID: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("min_cap_watts", sa.Double, nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "min_cap_watts")
