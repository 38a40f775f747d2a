"""Jobs' licenses: what each asked for with -L, as Slurm keeps it (sacct Licenses).

Revision ID: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("licenses", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("jobs", "licenses")
