"""Reading and writing accounting records through SQLAlchemy (SQLite, PostgreSQL, MariaDB).

Job rows are upserted by (cluster, job id, submit time) from the controller's job records,
so copying the same record twice never duplicates it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, selectinload
from wattsched import hostlist
from wattsched.accounting.models import ClusterRecord, JobRecord, NodeEventRecord, StepRecord

_MIGRATIONS = os.path.join(os.path.dirname(__file__), "migrations")


@dataclass(frozen=True, slots=True)
class JobQuery:
    """sacct's selection: ids, users, states and a time window (epoch seconds)."""

    cluster: str
    job_ids: tuple[int, ...] = ()
    users: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    start: float | None = None
    end: float | None = None
    limit: int = 100000


def engine_for(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.drivername.startswith("sqlite") and parsed.database:
        os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
        return create_engine(url, connect_args={"timeout": 30})
    if parsed.drivername == "postgresql":
        url = str(parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
    elif parsed.drivername in ("mysql", "mariadb"):
        url = str(parsed.set(drivername="mysql+pymysql").render_as_string(hide_password=False))
    return create_engine(url, pool_pre_ping=True)


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision."""
    from alembic import command
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", _MIGRATIONS)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class AccountingStore:
    def __init__(self, url: str):
        self.engine = engine_for(url)

    def close(self) -> None:
        self.engine.dispose()

    def setup(self, cluster: str, now: float) -> None:
        migrate(self.engine)
        with Session(self.engine) as session, session.begin():
            if session.get(ClusterRecord, cluster) is None:
                session.add(ClusterRecord(name=cluster, created=now))

    def upsert_jobs(self, cluster: str, jobs: list[dict[str, Any]]) -> None:
        if not jobs:
            return
        with Session(self.engine) as session, session.begin():
            ids = [j["job_id"] for j in jobs]
            existing = {(r.job_id, r.time_submit): r for r in session.scalars(
                select(JobRecord).options(selectinload(JobRecord.steps))
                .where(JobRecord.cluster == cluster, JobRecord.job_id.in_(ids)))}
            for job in jobs:
                record = existing.get((job["job_id"], job["submit_time"]))
                if record is None:
                    record = JobRecord(cluster=cluster, job_id=job["job_id"], time_submit=job["submit_time"])
                    session.add(record)
                _fill_job(record, job)
                _fill_steps(record, job.get("steps", []))

    def add_node_events(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        with Session(self.engine) as session, session.begin():
            session.add_all(NodeEventRecord(cluster=e["cluster"], node=e["node"], state=e["state"],
                                            reason=e.get("reason", ""), uid=e.get("uid", 0), time=e["time"])
                            for e in events)

    def query_jobs(self, query: JobQuery) -> list[dict[str, Any]]:
        stmt = select(JobRecord).options(selectinload(JobRecord.steps)).where(JobRecord.cluster == query.cluster)
        if query.job_ids:
            stmt = stmt.where((JobRecord.job_id.in_(query.job_ids)) |
                              (JobRecord.array_job_id.in_(query.job_ids)))
        if query.users:
            stmt = stmt.where(JobRecord.user.in_(query.users))
        if query.states:
            stmt = stmt.where(JobRecord.state.in_(query.states))
        if query.start is not None:
            # Slurm selects jobs that were eligible to run or running in the window.
            stmt = stmt.where((JobRecord.time_end == 0) | (JobRecord.time_end >= query.start))
        if query.end is not None:
            stmt = stmt.where(JobRecord.time_eligible <= query.end)
        stmt = stmt.order_by(JobRecord.job_id, JobRecord.time_submit).limit(query.limit)
        with Session(self.engine) as session:
            return [_job_dict(r) for r in session.scalars(stmt)]

    def node_events(self, cluster: str) -> list[dict[str, Any]]:
        with Session(self.engine) as session:
            rows = session.scalars(select(NodeEventRecord).where(NodeEventRecord.cluster == cluster)
                                   .order_by(NodeEventRecord.id))
            return [{"node": r.node, "state": r.state, "reason": r.reason, "uid": r.uid, "time": r.time}
                    for r in rows]


def _fill_job(record: JobRecord, job: dict[str, Any]) -> None:
    nodes = list(job.get("alloc_cpus", {}))
    state = job["state"]
    if state == "COMPLETING":
        state = job.get("final_state") or "COMPLETING"
    record.array_job_id = job.get("array_job_id", 0)
    record.array_task_id = job.get("array_task_id")
    record.name = job["name"]
    record.uid, record.user = job["uid"], job["user"]
    record.gid, record.group = job.get("gid", 0), job.get("group", "")
    record.account, record.partition = job.get("account", ""), job.get("partition", "")
    record.state = state
    record.cancelled_by = job.get("cancelled_by")
    record.exit_code, record.term_signal = job.get("exit_code", 0), job.get("term_signal", 0)
    record.node_list = hostlist.compress(nodes) if nodes else "None assigned"
    record.nnodes = len(nodes) or job.get("nodes_min", 1)
    record.alloc_cpus = sum(job.get("alloc_cpus", {}).values())
    record.req_cpus = job.get("ntasks", 1) * job.get("cpus_per_task", 1)
    record.req_nodes = job.get("nodes_min", 1)
    record.req_mem_mb = job.get("mem_per_node_mb", 0)
    record.req_mem_per_cpu = job.get("mem_per_cpu_mb", 0)
    record.timelimit_min = job.get("time_limit_min")
    record.time_eligible = job.get("eligible_time", 0.0)
    record.time_start, record.time_end = job.get("start_time", 0.0), job.get("end_time", 0.0)
    record.priority = job.get("priority", 0)
    record.restart_count = job.get("restart_count", 0)
    record.work_dir = job.get("work_dir", "")
    record.std_out, record.std_err = job.get("std_out", ""), job.get("std_err", "")
    record.submit_line = job.get("submit_line", "")
    record.comment, record.wckey = job.get("comment", ""), job.get("wckey", "")
    record.constraints = ",".join(job.get("features", []))


def _fill_steps(record: JobRecord, steps: list[dict[str, Any]]) -> None:
    by_id = {s.step_id: s for s in record.steps}
    for step in steps:
        row = by_id.get(step["step_id"])
        if row is None:
            row = StepRecord(step_id=step["step_id"])
            record.steps.append(row)
        row.name, row.state = step["name"], step["state"]
        row.exit_code, row.term_signal = step.get("exit_code", 0), step.get("term_signal", 0)
        row.node_list = hostlist.compress(step.get("nodes", []))
        row.nnodes, row.ntasks, row.alloc_cpus = len(step.get("nodes", [])), step["ntasks"], step["cpus"]
        row.time_start, row.time_end = step.get("start_time", 0.0), step.get("end_time", 0.0)
        row.total_cpu_s, row.max_rss_kb = step.get("total_cpu_s", 0.0), step.get("max_rss_kb", 0)


_JOB_COLUMNS = [c.key for c in JobRecord.__mapper__.column_attrs]
_STEP_COLUMNS = [c.key for c in StepRecord.__mapper__.column_attrs if c.key not in ("id", "job_row")]


def _job_dict(record: JobRecord) -> dict[str, Any]:
    data = {key: getattr(record, key) for key in _JOB_COLUMNS if key != "id"}
    data["steps"] = [{key: getattr(s, key) for key in _STEP_COLUMNS} for s in record.steps]
    return data
