"""Initial accounting schema: clusters, jobs, steps, node events, users, accounts.

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("clusters", sa.Column("name", sa.String(64), primary_key=True),
                    sa.Column("created", sa.Double, nullable=False))
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64), nullable=False, index=True),
        sa.Column("job_id", sa.BigInteger, nullable=False, index=True),
        sa.Column("array_job_id", sa.BigInteger, nullable=False),
        sa.Column("array_task_id", sa.Integer, nullable=True),
        sa.Column("name", sa.String(1024), nullable=False),
        sa.Column("uid", sa.Integer, nullable=False),
        sa.Column("user", sa.String(64), nullable=False, index=True),
        sa.Column("gid", sa.Integer, nullable=False),
        sa.Column("group_name", sa.String(64), nullable=False),
        sa.Column("account", sa.String(64), nullable=False),
        sa.Column("partition", sa.String(64), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("cancelled_by", sa.Integer, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=False),
        sa.Column("term_signal", sa.Integer, nullable=False),
        sa.Column("node_list", sa.Text, nullable=False),
        sa.Column("nnodes", sa.Integer, nullable=False),
        sa.Column("alloc_cpus", sa.Integer, nullable=False),
        sa.Column("req_cpus", sa.Integer, nullable=False),
        sa.Column("req_nodes", sa.Integer, nullable=False),
        sa.Column("req_mem_mb", sa.Integer, nullable=False),
        sa.Column("req_mem_per_cpu", sa.Integer, nullable=False),
        sa.Column("timelimit_min", sa.Integer, nullable=True),
        sa.Column("time_submit", sa.Double, nullable=False),
        sa.Column("time_eligible", sa.Double, nullable=False),
        sa.Column("time_start", sa.Double, nullable=False),
        sa.Column("time_end", sa.Double, nullable=False),
        sa.Column("priority", sa.BigInteger, nullable=False),
        sa.Column("restart_count", sa.Integer, nullable=False),
        sa.Column("work_dir", sa.Text, nullable=False),
        sa.Column("std_out", sa.Text, nullable=False),
        sa.Column("std_err", sa.Text, nullable=False),
        sa.Column("submit_line", sa.Text, nullable=False),
        sa.Column("comment", sa.Text, nullable=False),
        sa.Column("wckey", sa.String(64), nullable=False),
        sa.Column("constraints", sa.String(1024), nullable=False),
        sa.Column("consumed_energy_j", sa.BigInteger, nullable=True),
        sa.UniqueConstraint("cluster", "job_id", "time_submit", name="uq_job"),
    )
    op.create_table(
        "steps",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_row", sa.Integer, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False,
                  index=True),
        sa.Column("step_id", sa.String(16), nullable=False),
        sa.Column("name", sa.String(1024), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=False),
        sa.Column("term_signal", sa.Integer, nullable=False),
        sa.Column("node_list", sa.Text, nullable=False),
        sa.Column("nnodes", sa.Integer, nullable=False),
        sa.Column("ntasks", sa.Integer, nullable=False),
        sa.Column("alloc_cpus", sa.Integer, nullable=False),
        sa.Column("time_start", sa.Double, nullable=False),
        sa.Column("time_end", sa.Double, nullable=False),
        sa.Column("total_cpu_s", sa.Double, nullable=False),
        sa.Column("max_rss_kb", sa.BigInteger, nullable=False),
        sa.Column("consumed_energy_j", sa.BigInteger, nullable=True),
        sa.UniqueConstraint("job_row", "step_id", name="uq_step"),
    )
    op.create_table(
        "node_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64), nullable=False, index=True),
        sa.Column("node", sa.String(128), nullable=False, index=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("uid", sa.Integer, nullable=False),
        sa.Column("time", sa.Double, nullable=False),
    )
    op.create_table("users", sa.Column("name", sa.String(64), primary_key=True),
                    sa.Column("default_account", sa.String(64), nullable=False),
                    sa.Column("admin_level", sa.String(16), nullable=False))
    op.create_table("accounts", sa.Column("name", sa.String(64), primary_key=True),
                    sa.Column("description", sa.Text, nullable=False),
                    sa.Column("organization", sa.String(64), nullable=False),
                    sa.Column("parent", sa.String(64), nullable=False))


def downgrade() -> None:
    for table in ("accounts", "users", "node_events", "steps", "jobs", "clusters"):
        op.drop_table(table)
