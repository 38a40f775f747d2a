"""Jobs' GPUs: asked for and allocated, and their type (sacct's ReqTRES and AllocTRES gres/gpu).

Revision ID: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("req_gpus", sa.Integer, nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("alloc_gpus", sa.Integer, nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("gpu_type", sa.String(64), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("jobs", "gpu_type")
    op.drop_column("jobs", "alloc_gpus")
    op.drop_column("jobs", "req_gpus")
