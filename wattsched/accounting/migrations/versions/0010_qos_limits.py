"""QOS, association limits and a job's QOS (sacctmgr's qos entity, GrpTRES and the rest).

Revision ID: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    qos = op.create_table(
        "qos",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("description", sa.Text, nullable=False, server_default=""),
        sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
        sa.Column("flags", sa.String(512), nullable=False, server_default=""),
        sa.Column("usage_factor", sa.Double, nullable=False, server_default="1"),
        sa.Column("usage_threshold", sa.Double, nullable=True),
        sa.Column("preempt", sa.Text, nullable=False, server_default=""),
        sa.Column("preempt_mode", sa.String(64), nullable=False, server_default="cluster"),
        sa.Column("preempt_exempt_time", sa.Integer, nullable=True),
        sa.Column("grace_time", sa.Integer, nullable=False, server_default="0"),
        sa.Column("limits", sa.Text, nullable=False, server_default="{}"),
    )
    # Slurm's database starts with the QOS "normal", which root's association may use
    op.bulk_insert(qos, [{"name": "normal", "description": "Normal QOS default", "priority": 0, "flags": "",
                          "usage_factor": 1.0, "preempt": "", "preempt_mode": "cluster", "grace_time": 0,
                          "limits": "{}"}])
    op.add_column("associations", sa.Column("limits", sa.Text, nullable=False, server_default="{}"))
    op.add_column("associations", sa.Column("qos", sa.Text, nullable=False, server_default=""))
    op.add_column("associations", sa.Column("default_qos", sa.String(64), nullable=False, server_default=""))
    op.add_column("jobs", sa.Column("qos", sa.String(64), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("jobs", "qos")
    op.drop_column("associations", "default_qos")
    op.drop_column("associations", "qos")
    op.drop_column("associations", "limits")
    op.drop_table("qos")
