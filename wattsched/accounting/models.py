"""The accounting schema. Alembic migrations in ``migrations/`` create and evolve it."""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Double, ForeignKey, Index, Integer, String, Table, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


def table(record: type[Base]) -> Table:
    """A record's Table, for Core statements: declarative typing calls it a FromClause, but every
    record here maps one Table."""
    mapped = record.__table__
    assert isinstance(mapped, Table)
    return mapped


class ClusterRecord(Base):
    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    created: Mapped[float] = mapped_column(Double, default=0.0)


class JobRecord(Base):
    __tablename__ = "jobs"
    __table_args__ = (UniqueConstraint("cluster", "job_id", "time_submit", name="uq_job"),
                      Index("ix_jobs_cluster_time_end", "cluster", "time_end"),
                      Index("ix_jobs_history", "cluster", "history_key", "time_end"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(64), index=True)
    job_id: Mapped[int] = mapped_column(BigInteger, index=True)
    array_job_id: Mapped[int] = mapped_column(BigInteger, default=0)
    array_task_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    name: Mapped[str] = mapped_column(String(1024), default="")
    uid: Mapped[int] = mapped_column(Integer)
    user: Mapped[str] = mapped_column(String(64), index=True)
    gid: Mapped[int] = mapped_column(Integer, default=0)
    group: Mapped[str] = mapped_column("group_name", String(64), default="")
    account: Mapped[str] = mapped_column(String(64), default="")
    partition: Mapped[str] = mapped_column(String(64), default="")
    state: Mapped[str] = mapped_column(String(32))
    cancelled_by: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_code: Mapped[int] = mapped_column(Integer, default=0)
    term_signal: Mapped[int] = mapped_column(Integer, default=0)
    node_list: Mapped[str] = mapped_column(Text, default="")
    nnodes: Mapped[int] = mapped_column(Integer, default=0)
    alloc_cpus: Mapped[int] = mapped_column(Integer, default=0)
    req_cpus: Mapped[int] = mapped_column(Integer, default=0)
    req_nodes: Mapped[int] = mapped_column(Integer, default=1)
    req_mem_mb: Mapped[int] = mapped_column(Integer, default=0)
    req_mem_per_cpu: Mapped[int] = mapped_column(Integer, default=0)
    timelimit_min: Mapped[int | None] = mapped_column(Integer, nullable=True)
    time_submit: Mapped[float] = mapped_column(Double)
    time_eligible: Mapped[float] = mapped_column(Double, default=0.0)
    time_start: Mapped[float] = mapped_column(Double, default=0.0)
    time_end: Mapped[float] = mapped_column(Double, default=0.0)
    time_suspended: Mapped[float] = mapped_column(Double, default=0.0)  # seconds suspended (scontrol suspend)
    priority: Mapped[int] = mapped_column(BigInteger, default=0)
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    work_dir: Mapped[str] = mapped_column(Text, default="")
    std_out: Mapped[str] = mapped_column(Text, default="")
    std_err: Mapped[str] = mapped_column(Text, default="")
    submit_line: Mapped[str] = mapped_column(Text, default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    wckey: Mapped[str] = mapped_column(String(64), default="")
    licenses: Mapped[str] = mapped_column(Text, default="")  # -L as given (Slurm's job licenses)
    constraints: Mapped[str] = mapped_column(String(1024), default="")
    consumed_energy_j: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    reservation: Mapped[str] = mapped_column(String(256), default="")
    req_cpu_freq: Mapped[str] = mapped_column(String(64), default="")
    cpu_freq_khz: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ave_cpu_freq_khz: Mapped[int | None] = mapped_column(Integer, nullable=True)
    profile: Mapped[str] = mapped_column(String(32), default="")
    reason: Mapped[str] = mapped_column(String(64), default="None")
    admin_comment: Mapped[str] = mapped_column(Text, default="")
    req_gpus: Mapped[int] = mapped_column(Integer, default=0)  # GPUs asked for in all (wattsched.gres)
    alloc_gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpu_type: Mapped[str] = mapped_column(String(64), default="")  # the type asked for ("" any)
    qos: Mapped[str] = mapped_column(String(64), default="")
    # its energy policy, the frequency it chose with the model's projections, and the signature (means)
    energy_policy: Mapped[str] = mapped_column(String(16), default="")
    policy_freq_khz: Mapped[int] = mapped_column(Integer, default=0)
    pred_time_factor: Mapped[float] = mapped_column(Double, default=0.0)
    pred_energy_factor: Mapped[float] = mapped_column(Double, default=0.0)
    sig_cpi: Mapped[float] = mapped_column(Double, default=0.0)
    sig_gbs: Mapped[float] = mapped_column(Double, default=0.0)
    sig_memory_bound: Mapped[float] = mapped_column(Double, default=0.0)
    # the same job's earlier runs (wattsched.prediction): its key and their expectation at submission
    history_key: Mapped[str] = mapped_column(String(16), default="")
    exp_elapsed_s: Mapped[float] = mapped_column(Double, default=0.0)
    exp_energy_j: Mapped[float] = mapped_column(Double, default=0.0)
    exp_watts: Mapped[float] = mapped_column(Double, default=0.0)
    co2e_g: Mapped[float] = mapped_column(Double, default=0.0)  # its emissions (wattsched.carbon), grams
    min_cap_watts: Mapped[float | None] = mapped_column(Double, nullable=True)  # the lowest its power limits held it to

    steps: Mapped[list[StepRecord]] = relationship(back_populates="job", cascade="all, delete-orphan",
                                                   order_by="StepRecord.id")


class StepRecord(Base):
    __tablename__ = "steps"
    __table_args__ = (UniqueConstraint("job_row", "step_id", name="uq_step"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_row: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    step_id: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(1024), default="")
    state: Mapped[str] = mapped_column(String(32))
    exit_code: Mapped[int] = mapped_column(Integer, default=0)
    term_signal: Mapped[int] = mapped_column(Integer, default=0)
    node_list: Mapped[str] = mapped_column(Text, default="")
    nnodes: Mapped[int] = mapped_column(Integer, default=0)
    ntasks: Mapped[int] = mapped_column(Integer, default=0)
    alloc_cpus: Mapped[int] = mapped_column(Integer, default=0)
    time_start: Mapped[float] = mapped_column(Double, default=0.0)
    time_end: Mapped[float] = mapped_column(Double, default=0.0)
    total_cpu_s: Mapped[float] = mapped_column(Double, default=0.0)
    max_rss_kb: Mapped[int] = mapped_column(BigInteger, default=0)
    consumed_energy_j: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # the rest of wattsched.usage's summary of the step's tasks
    user_cpu_s: Mapped[float] = mapped_column(Double, default=0.0)
    system_cpu_s: Mapped[float] = mapped_column(Double, default=0.0)
    min_cpu_s: Mapped[float] = mapped_column(Double, default=0.0)
    min_cpu_node: Mapped[str] = mapped_column(String(128), default="")
    min_cpu_task: Mapped[int] = mapped_column(Integer, default=0)
    max_rss_node: Mapped[str] = mapped_column(String(128), default="")
    max_rss_task: Mapped[int] = mapped_column(Integer, default=0)
    ave_rss_kb: Mapped[int] = mapped_column(BigInteger, default=0)
    disk_read_b: Mapped[int] = mapped_column(BigInteger, default=0)
    max_disk_read_b: Mapped[int] = mapped_column(BigInteger, default=0)
    max_disk_read_node: Mapped[str] = mapped_column(String(128), default="")
    max_disk_read_task: Mapped[int] = mapped_column(Integer, default=0)
    disk_write_b: Mapped[int] = mapped_column(BigInteger, default=0)
    max_disk_write_b: Mapped[int] = mapped_column(BigInteger, default=0)
    max_disk_write_node: Mapped[str] = mapped_column(String(128), default="")
    max_disk_write_task: Mapped[int] = mapped_column(Integer, default=0)
    max_pages: Mapped[int] = mapped_column(BigInteger, default=0)

    job: Mapped[JobRecord] = relationship(back_populates="steps")


class NodeEventRecord(Base):
    __tablename__ = "node_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(64), index=True)
    node: Mapped[str] = mapped_column(String(128), index=True)
    state: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    uid: Mapped[int] = mapped_column(Integer, default=0)
    time: Mapped[float] = mapped_column(Double)


class ReservationRecord(Base):
    """One occurrence of a reservation (a DAILY one gets a row per day), as slurmdbd keeps them."""

    __tablename__ = "reservations"
    __table_args__ = (UniqueConstraint("cluster", "resv_id", "time_start", name="uq_resv"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(64), index=True)
    resv_id: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(256))
    time_start: Mapped[float] = mapped_column(Double)
    time_end: Mapped[float] = mapped_column(Double)
    nodes: Mapped[str] = mapped_column(Text, default="")
    node_cnt: Mapped[int] = mapped_column(Integer, default=0)
    users: Mapped[str] = mapped_column(Text, default="")
    accounts: Mapped[str] = mapped_column(Text, default="")
    partition: Mapped[str] = mapped_column(String(64), default="")
    flags: Mapped[str] = mapped_column(String(256), default="")
    watts: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False)


class UserRecord(Base):
    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    default_account: Mapped[str] = mapped_column(String(64), default="")
    admin_level: Mapped[str] = mapped_column(String(16), default="None")


class AccountRecord(Base):
    __tablename__ = "accounts"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    organization: Mapped[str] = mapped_column(String(64), default="")
    parent: Mapped[str] = mapped_column(String(64), default="root")


class AssociationRecord(Base):
    """An account (``user`` empty) or a user's membership of an account, on one cluster."""

    __tablename__ = "associations"
    __table_args__ = (UniqueConstraint("cluster", "account", "user", name="uq_assoc"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(64), index=True)
    account: Mapped[str] = mapped_column(String(64))
    user: Mapped[str] = mapped_column(String(64), default="")
    parent: Mapped[str] = mapped_column(String(64), default="root")
    shares: Mapped[int] = mapped_column(Integer, default=1)
    limits: Mapped[str] = mapped_column(Text, default="{}")  # JSON of wattsched.limits.Limits
    qos: Mapped[str] = mapped_column(Text, default="")  # the QOS it may use ("": its parent's)
    default_qos: Mapped[str] = mapped_column(String(64), default="")


class QosRecord(Base):
    """A QOS as sacctmgr keeps it (wattsched.limits.Qos)."""

    __tablename__ = "qos"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    flags: Mapped[str] = mapped_column(String(512), default="")
    usage_factor: Mapped[float] = mapped_column(Double, default=1.0)
    usage_threshold: Mapped[float | None] = mapped_column(Double, nullable=True)
    preempt: Mapped[str] = mapped_column(Text, default="")
    preempt_mode: Mapped[str] = mapped_column(String(64), default="cluster")
    preempt_exempt_time: Mapped[int | None] = mapped_column(Integer, nullable=True)
    grace_time: Mapped[int] = mapped_column(Integer, default=0)
    limits: Mapped[str] = mapped_column(Text, default="{}")  # JSON of wattsched.limits.Limits
    energy_policy: Mapped[str] = mapped_column(String(16), default="")  # ours (wattsched.energypolicy)
