"""Advanced reservations: a reservations table (one row per occurrence) and each job's reservation.

Revision ID: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64), nullable=False, index=True),
        sa.Column("resv_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("time_start", sa.Double, nullable=False),
        sa.Column("time_end", sa.Double, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("node_cnt", sa.Integer, nullable=False),
        sa.Column("users", sa.Text, nullable=False),
        sa.Column("accounts", sa.Text, nullable=False),
        sa.Column("partition", sa.String(64), nullable=False),
        sa.Column("flags", sa.String(256), nullable=False),
        sa.Column("watts", sa.BigInteger, nullable=True),
        sa.Column("deleted", sa.Boolean, nullable=False),
        sa.UniqueConstraint("cluster", "resv_id", "time_start", name="uq_resv"),
    )
    op.add_column("jobs", sa.Column("reservation", sa.String(256), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("jobs", "reservation")
    op.drop_table("reservations")
