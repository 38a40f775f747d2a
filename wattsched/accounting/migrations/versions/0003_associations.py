"""Associations: (cluster, account, user) with their parent and fair-share shares.

Revision ID: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "associations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64), nullable=False, index=True),
        sa.Column("account", sa.String(64), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("parent", sa.String(64), nullable=False),
        sa.Column("shares", sa.Integer, nullable=False),
        sa.UniqueConstraint("cluster", "account", "user", name="uq_assoc"),
    )


def downgrade() -> None:
    op.drop_table("associations")
