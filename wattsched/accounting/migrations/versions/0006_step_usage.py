"""Step usage as sacct shows it (user/system CPU, MinCPU, MaxRSS node and task, disk I/O, pages),
and each job's Reason and AdminComment.

Revision ID: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_FLOATS = ("user_cpu_s", "system_cpu_s", "min_cpu_s")
_NAMES = ("min_cpu_node", "max_rss_node", "max_disk_read_node", "max_disk_write_node")
_RANKS = ("min_cpu_task", "max_rss_task", "max_disk_read_task", "max_disk_write_task")
_SIZES = ("ave_rss_kb", "disk_read_b", "max_disk_read_b", "disk_write_b", "max_disk_write_b", "max_pages")


def upgrade() -> None:
    for name in _FLOATS:
        op.add_column("steps", sa.Column(name, sa.Double, nullable=False, server_default="0"))
    for name in _NAMES:
        op.add_column("steps", sa.Column(name, sa.String(128), nullable=False, server_default=""))
    for name in _RANKS:
        op.add_column("steps", sa.Column(name, sa.Integer, nullable=False, server_default="0"))
    for name in _SIZES:
        op.add_column("steps", sa.Column(name, sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("reason", sa.String(64), nullable=False, server_default="None"))
    op.add_column("jobs", sa.Column("admin_comment", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("jobs", "admin_comment")
    op.drop_column("jobs", "reason")
    for name in (*_SIZES, *_RANKS, *_NAMES, *_FLOATS):
        op.drop_column("steps", name)
