"""Jobs' emissions: their energy at the grid's carbon intensity over their run (sacct CO2e).

Revision ID: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("co2e_g", sa.Double, nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("jobs", "co2e_g")
