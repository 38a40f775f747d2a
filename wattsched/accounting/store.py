"""Reading and writing accounting records through SQLAlchemy (SQLite, PostgreSQL, MariaDB).

Job rows are upserted by (cluster, job id, submit time) from the controller's job records,
so copying the same record twice never duplicates it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnDefault, bindparam, create_engine, func, insert, select, text, update
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, selectinload

from wattsched import hostlist
from wattsched.accounting.assoc import AssocStore
from wattsched.accounting.models import (
    ClusterRecord,
    JobRecord,
    NodeEventRecord,
    QosRecord,
    ReservationRecord,
    StepRecord,
    table,
)
from wattsched.model import JOB_FIELD_NAMES
from wattsched.private import private_sqlite
from wattsched.usage import summarize

DB_TIMEOUT_S = 5  # to connect, or to wait for a pooled connection
DB_STATEMENT_TIMEOUT_S = 20  # one statement: the controller answers before the CLI's 30 s run out
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
        os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), mode=0o700, exist_ok=True)
        private_sqlite(os.path.abspath(parsed.database))
        return create_engine(url, connect_args={"timeout": DB_STATEMENT_TIMEOUT_S})
    # a database that hangs must not hang its callers: bounded connects and statements
    if parsed.drivername == "postgresql":
        url = str(parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False))
        return create_engine(url, pool_pre_ping=True, pool_timeout=DB_TIMEOUT_S,
                             connect_args={"connect_timeout": DB_TIMEOUT_S,
                                           "options": f"-c statement_timeout={DB_STATEMENT_TIMEOUT_S * 1000}"})
    if parsed.drivername in ("mysql", "mariadb"):
        url = str(parsed.set(drivername="mysql+pymysql").render_as_string(hide_password=False))
        return create_engine(url, pool_pre_ping=True, pool_timeout=DB_TIMEOUT_S,
                             connect_args={"connect_timeout": DB_TIMEOUT_S, "read_timeout": DB_STATEMENT_TIMEOUT_S,
                                           "write_timeout": DB_STATEMENT_TIMEOUT_S})
    return create_engine(url, pool_pre_ping=True)


def head_revision() -> str:
    """The newest migration's revision. Each migration is a file ``NNNN_what.py`` whose revision is
    its number, down from the one before (tests/accounting/test_accounting_db.py checks the chain against
    Alembic's own reading of it)."""
    return max(name for name in os.listdir(os.path.join(_MIGRATIONS, "versions"))
               if name[:4].isdigit() and name.endswith(".py"))[:4]


def schema_revision(engine: Engine) -> str | None:
    """The revision the database's schema is at, None before the first migration."""
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except Exception:  # (no such table: a new database; the driver's own error class)
        return None


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest Alembic revision. A database already there is left without
    importing Alembic. One that is not is migrated in a forked child, so that the caller (the
    controller, which lives for months) never holds Alembic: loading it and reading the migrations
    cost 95 ms and 12 MiB of resident memory the controller kept (measured on SQLite), a sixth of
    an idle controller's. The child's error, if any, is raised here as a :class:`MigrationError`."""
    if schema_revision(engine) == head_revision():
        return
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connections (the parent's pool is the parent's), then out
        os.close(reader)
        code = 1
        try:
            engine.dispose(close=False)
            _upgrade(engine)
            code = 0
        except BaseException as exc:  # everything the child knows goes to the parent
            os.write(writer, f"{type(exc).__name__}: {exc}"[:4000].encode(errors="replace"))
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as answer:
        error = answer.read(4096).decode(errors="replace")
    _pid, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise MigrationError(f"migrating the accounting schema to {head_revision()} failed: "
                             f"{error or f'exit status {os.waitstatus_to_exitcode(status)}'}")


class MigrationError(RuntimeError):
    """The schema could not be brought to the newest revision."""


def _upgrade(engine: Engine) -> None:
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

    def ping(self) -> bool:
        """Whether the database answers a plain query (so a refused write was the record's fault)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    def setup(self, cluster: str, now: float) -> None:
        migrate(self.engine)
        with Session(self.engine) as session, session.begin():
            if session.get(ClusterRecord, cluster) is None:
                session.add(ClusterRecord(name=cluster, created=now))
        self.assocs(cluster).ensure_root()

    def assocs(self, cluster: str) -> AssocStore:
        return AssocStore(self.engine, cluster)

    def history_start(self, cluster: str) -> float:
        """When the cluster's recorded history begins: its creation, or its first job if earlier."""
        with Session(self.engine) as session:
            record = session.get(ClusterRecord, cluster)
            first = session.scalar(select(func.min(JobRecord.time_start)).where(
                JobRecord.cluster == cluster, JobRecord.time_start > 0))
        return min(record.created if record else float("inf"), first or float("inf"))

    def upsert_jobs(self, cluster: str, jobs: list[dict[str, Any]]) -> None:
        """Insert or update job rows and their steps in bulk (Core statements: the ORM costs ~10x more)."""
        if not jobs:
            return
        jobs_t, steps_t = table(JobRecord), table(StepRecord)
        with self.engine.begin() as conn:
            ids = sorted({j["job_id"] for j in jobs})
            known = {(r.job_id, r.time_submit): r.id for r in conn.execute(
                select(jobs_t.c.id, jobs_t.c.job_id, jobs_t.c.time_submit)
                .where(jobs_t.c.cluster == cluster, jobs_t.c.job_id.in_(ids)))}
            latest = {(j["job_id"], j["submit_time"]): j for j in jobs}  # a batch may hold one job twice
            new = [_job_values(cluster, j) for key, j in latest.items() if key not in known]
            changed = [dict(_job_values(cluster, j), row_id=known[key]) for key, j in latest.items() if key in known]
            if new:
                conn.execute(insert(jobs_t), new)
                known.update({(r.job_id, r.time_submit): r.id for r in conn.execute(
                    select(jobs_t.c.id, jobs_t.c.job_id, jobs_t.c.time_submit)
                    .where(jobs_t.c.cluster == cluster, jobs_t.c.job_id.in_([v["job_id"] for v in new])))})
            if changed:
                conn.execute(update(jobs_t).where(jobs_t.c.id == bindparam("row_id")), changed)
            rows = {known[key]: j.get("steps", []) for key, j in latest.items()}
            have = {(r.job_row, r.step_id): r.id for r in conn.execute(
                select(steps_t.c.id, steps_t.c.job_row, steps_t.c.step_id).where(steps_t.c.job_row.in_(list(rows))))}
            new_steps, changed_steps = [], []
            for row_id, steps in rows.items():
                for step in steps:
                    values = dict(_step_values(step), job_row=row_id)
                    if (row_id, step["step_id"]) in have:
                        changed_steps.append(dict(values, sid=have[(row_id, step["step_id"])]))
                    else:
                        new_steps.append(values)
            if new_steps:
                conn.execute(insert(steps_t), new_steps)
            if changed_steps:
                conn.execute(update(steps_t).where(steps_t.c.id == bindparam("sid")), changed_steps)

    def upsert_reservations(self, cluster: str, reservations: list[dict[str, Any]]) -> None:
        """Insert or update reservation rows by (cluster, id, start): each occurrence is a row."""
        if not reservations:
            return
        resv_t = table(ReservationRecord)
        with self.engine.begin() as conn:
            for resv in reservations:
                values = _resv_values(cluster, resv)
                row = conn.execute(select(resv_t.c.id).where(
                    resv_t.c.cluster == cluster, resv_t.c.resv_id == resv["resv_id"],
                    resv_t.c.time_start == resv["start_time"])).first()
                if row is None:
                    conn.execute(insert(resv_t), values)
                else:
                    conn.execute(update(resv_t).where(resv_t.c.id == row.id), values)

    def reservations(self, cluster: str) -> list[dict[str, Any]]:
        with Session(self.engine) as session:
            rows = session.scalars(select(ReservationRecord).where(ReservationRecord.cluster == cluster)
                                   .order_by(ReservationRecord.resv_id, ReservationRecord.time_start))
            return [{c.name: getattr(r, c.name) for c in table(ReservationRecord).columns if c.name != "id"}
                    for r in rows]

    def add_node_events(self, events: list[dict[str, Any]]) -> None:
        """Record node events; one already recorded (the same node, state and time: a batch written
        again after a controller died before it could drop it) is not recorded twice."""
        if not events:
            return
        with Session(self.engine) as session, session.begin():
            rec = NodeEventRecord
            have = {tuple(row) for row in session.execute(select(rec.cluster, rec.node, rec.state, rec.time).where(
                rec.time.in_(sorted({e["time"] for e in events}))))}
            fresh = {(e["cluster"], e["node"], e["state"], e["time"]): e for e in events}
            session.add_all(NodeEventRecord(cluster=e["cluster"], node=e["node"], state=e["state"],
                                            reason=e.get("reason", ""), uid=e.get("uid", 0), time=e["time"])
                            for key, e in fresh.items() if key not in have)

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
            qos_ids = {name: id_ for id_, name in session.execute(select(QosRecord.id, QosRecord.name))}
            return [_job_dict(r, qos_ids) for r in session.scalars(stmt)]

    def energy_by(self, cluster: str, column: str, start: float, end: float) -> list[tuple[str, float, int]]:
        """(user or account, joules, jobs) of the jobs that ended in [start, end], most energy first."""
        owner = {"user": JobRecord.user, "account": JobRecord.account}[column]
        stmt = (select(owner, func.coalesce(func.sum(JobRecord.consumed_energy_j), 0), func.count())
                .where(JobRecord.cluster == cluster, JobRecord.time_end >= start, JobRecord.time_end <= end,
                       JobRecord.time_end > 0)
                .group_by(owner).order_by(func.coalesce(func.sum(JobRecord.consumed_energy_j), 0).desc()))
        with Session(self.engine) as session:
            return [(name, float(joules or 0), int(count)) for name, joules, count in session.execute(stmt)]

    def wckeys(self, cluster: str, users: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """The workload characterization keys the jobs used, each with its user (Slurm's wckey
        table, which it fills as jobs use them); of ``users`` alone where given."""
        stmt = (select(JobRecord.wckey, JobRecord.user).distinct()
                .where(JobRecord.cluster == cluster, JobRecord.wckey != "").order_by(JobRecord.wckey, JobRecord.user))
        if users:
            stmt = stmt.where(JobRecord.user.in_(users))
        with Session(self.engine) as session:
            return [{"name": name, "user": user, "cluster": cluster} for name, user in session.execute(stmt)]

    def node_events(self, cluster: str) -> list[dict[str, Any]]:
        with Session(self.engine) as session:
            rows = session.scalars(select(NodeEventRecord).where(NodeEventRecord.cluster == cluster)
                                   .order_by(NodeEventRecord.id))
            return [{"node": r.node, "state": r.state, "reason": r.reason, "uid": r.uid, "time": r.time}
                    for r in rows]


def _job_values(cluster: str, job: dict[str, Any]) -> dict[str, Any]:
    """A controller job record (model.Job.to_dict()) as accounting column values (keys are the
    table's column names): the columns named as the job's fields take them (the column's default
    when a record lacks one); the others, and those whose meaning differs, are listed in
    _JOB_COLUMN_VALUES, the one place the accounting view of a job differs from the job."""
    values = {name: job.get(name, default) for name, default in _SAME_AS_JOB}
    values.update({name: compute(job) for name, compute in _JOB_COLUMN_VALUES.items()})
    values["state"], values["time_end"] = _accounted_state(job)
    values["cluster"] = cluster
    return values


def _accounted_state(job: dict[str, Any]) -> tuple[str, float]:
    """The state and end time sacct shows. Slurm's database holds a job as RUNNING until its
    completion record, which carries the final state and the energy together: a tool that reads
    it at once must not see 0 J (and sacct never shows COMPLETING, which tools such as parsl do
    not know)."""
    state, end = job["state"], job.get("end_time", 0.0)
    if state == "RUNNING" and job.get("suspended_at"):
        state = "SUSPENDED"
    if state == "COMPLETING":
        pending = job.get("energy_pending")
        state, end = ("RUNNING", 0.0) if pending else (job.get("final_state") or "COMPLETING", end)
    return state, end


def _node_list(job: dict[str, Any]) -> str:
    nodes = list(job.get("alloc_cpus", {}))
    return job.get("nodes_expr") or (hostlist.compress(nodes) if nodes else "None assigned")


# the accounting columns that are not the job's field of the same name: Slurm's names and sums (and
# state and time_end, from _accounted_state)
_JOB_COLUMN_VALUES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "time_submit": lambda j: j["submit_time"],
    "group_name": lambda j: j.get("group", ""),
    "node_list": _node_list,
    "nnodes": lambda j: len(j.get("alloc_cpus", {})) or j.get("nodes_min", 1),
    "alloc_cpus": lambda j: sum(j.get("alloc_cpus", {}).values()),
    "req_cpus": lambda j: j.get("ntasks", 1) * j.get("cpus_per_task", 1),
    "req_nodes": lambda j: j.get("nodes_min", 1),
    "req_mem_mb": lambda j: j.get("mem_per_node_mb", 0),
    "req_mem_per_cpu": lambda j: j.get("mem_per_cpu_mb", 0),
    "timelimit_min": lambda j: j.get("time_limit_min"),
    "time_eligible": lambda j: j.get("eligible_time", 0.0),
    "time_start": lambda j: j.get("start_time", 0.0),
    "time_suspended": lambda j: j.get("suspended_s", 0.0),
    "constraints": lambda j: ",".join(j.get("features", [])),
    "req_cpu_freq": lambda j: j.get("cpu_freq", ""),
    "ave_cpu_freq_khz": lambda j: j.get("ave_cpu_freq_khz") or None,
    "profile": lambda j: ",".join(j.get("profile", ())),
    "reason": lambda j: j.get("reason", "None")[:64],
    "req_gpus": lambda j: j.get("gpus_per_node", 0) * j.get("nodes_min", 1)
    + j.get("gpus_per_task", 0) * j.get("ntasks", 1) + j.get("gpus_per_job", 0),
    "alloc_gpus": lambda j: sum(len(v) for v in j.get("alloc_gpus", {}).values()),
}
# the columns that hold the job's field of the same name, each with the column's default
_SAME_AS_JOB = tuple((c.name, c.default.arg if isinstance(c.default, ColumnDefault) else None)
                     for c in table(JobRecord).columns
                     if c.name in JOB_FIELD_NAMES and c.name not in _JOB_COLUMN_VALUES and c.name != "state")


def _step_values(step: dict[str, Any]) -> dict[str, Any]:
    nodes = step.get("nodes", [])
    return {
        "step_id": step["step_id"], "name": step["name"], "state": step["state"],
        "exit_code": step.get("exit_code", 0), "term_signal": step.get("term_signal", 0),
        "node_list": hostlist.compress(nodes), "nnodes": len(nodes), "ntasks": step["ntasks"],
        "alloc_cpus": step["cpus"], "time_start": step.get("start_time", 0.0), "time_end": step.get("end_time", 0.0),
        "consumed_energy_j": step.get("consumed_energy_j"), **summarize(step.get("tasks", [])),
    }


def _resv_values(cluster: str, resv: dict[str, Any]) -> dict[str, Any]:
    return {"cluster": cluster, "resv_id": resv["resv_id"], "name": resv["name"], "time_start": resv["start_time"],
            "time_end": resv["end_time"], "nodes": hostlist.compress(resv["nodes"]) if resv["nodes"] else "",
            "node_cnt": len(resv["nodes"]), "users": ",".join(resv["users"]), "accounts": ",".join(resv["accounts"]),
            "partition": resv.get("partition", ""), "flags": ",".join(resv["flags"]), "watts": resv.get("watts"),
            "deleted": bool(resv.get("deleted"))}


_JOB_COLUMNS = [c.key for c in JobRecord.__mapper__.column_attrs]
_STEP_COLUMNS = [c.key for c in StepRecord.__mapper__.column_attrs if c.key not in ("id", "job_row")]


def _job_dict(record: JobRecord, qos_ids: dict[str, int]) -> dict[str, Any]:
    data = {key: getattr(record, key) for key in _JOB_COLUMNS if key != "id"}
    data["db_index"] = record.id
    data["qos_id"] = qos_ids.get(record.qos, 0)  # sacct's QOSRAW
    data["steps"] = [{key: getattr(s, key) for key in _STEP_COLUMNS} for s in record.steps]
    return data
