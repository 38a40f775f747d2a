"""Jobs' energy policies and signatures (sacct EnergyPolicy, PolicyFreq, PredTime, PredEnergy, CPI,
MemBW, MemBound), their predictions from earlier runs (ExpElapsed, ExpEnergy, ExpWatts), and the
QOS's energy policy.

Revision ID: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("energy_policy", sa.String(16), ""),
    ("policy_freq_khz", sa.Integer, "0"),
    ("pred_time_factor", sa.Double, "0"),
    ("pred_energy_factor", sa.Double, "0"),
    ("sig_cpi", sa.Double, "0"),
    ("sig_gbs", sa.Double, "0"),
    ("sig_memory_bound", sa.Double, "0"),
    ("history_key", sa.String(16), ""),
    ("exp_elapsed_s", sa.Double, "0"),
    ("exp_energy_j", sa.Double, "0"),
    ("exp_watts", sa.Double, "0"),
)


def upgrade() -> None:
    for name, kind, default in _COLUMNS:
        op.add_column("jobs", sa.Column(name, kind, nullable=False, server_default=default))
    op.create_index("ix_jobs_history", "jobs", ["cluster", "history_key", "time_end"])
    op.add_column("qos", sa.Column("energy_policy", sa.String(16), nullable=False, server_default=""))


def downgrade() -> None:
    op.drop_column("qos", "energy_policy")
    op.drop_index("ix_jobs_history", "jobs")
    for name, _kind, _default in reversed(_COLUMNS):
        op.drop_column("jobs", name)
