"""The accounting layer on SQLite, PostgreSQL and MariaDB: migrations, upserts, queries."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from wattsched.accounting.store import AccountingStore, JobQuery
from wattsched.model import Allocation, Job, Step

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
MARIA_ADMIN = "mysql+pymysql://root@127.0.0.1:3306/"


def _server_database(admin_url: str, url_template: str, quote: str) -> Iterator[str]:
    name = f"wattsched_test_{uuid.uuid4().hex[:10]}"
    try:
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE {quote}{name}{quote}"))
    except Exception as exc:  # no server here: say so rather than fail
        pytest.skip(f"database server not available at {admin_url}: {type(exc).__name__}: {exc}")
    try:
        yield url_template.format(name=name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE {quote}{name}{quote}"))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def db_url(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'acct.db'}"
    elif request.param == "postgresql":
        yield from _server_database(PG_ADMIN, "postgresql://postgres@127.0.0.1:5432/{name}", '"')
    else:
        yield from _server_database(MARIA_ADMIN, "mysql://root@127.0.0.1:3306/{name}", "`")


@pytest.fixture
def store(db_url: str) -> Iterator[AccountingStore]:
    opened = AccountingStore(db_url)
    opened.setup("c1", time.time())
    yield opened
    opened.close()


def _job(job_id: int, state: str = "COMPLETED", **changes) -> dict:
    job = Job(job_id=job_id, name=f"job{job_id}", uid=1000, user="alice", partition="debug", state=state,
              submit_time=1000.0 + job_id, eligible_time=1000.0 + job_id, start_time=1010.0, end_time=1070.0,
              alloc=Allocation(alloc_cpus={"n01": 4, "n02": 4}), time_limit_min=30,
              steps=[Step(step_id="batch", name="batch", state="COMPLETED", nodes=["n01"], cpus=4,
                          start_time=1010.0, end_time=1070.0,
                          tasks=[{"task": 0, "node": "n01", "user_cpu_s": 10.0, "system_cpu_s": 2.5,
                                  "max_rss_kb": 2048, "disk_read_b": 4096, "disk_write_b": 8192, "pages": 3}])])
    return {**job.to_dict(), **changes}


def test_round_trip_and_idempotent_upserts(store: AccountingStore) -> None:
    store.setup("c1", time.time())  # migrating twice is harmless
    store.upsert_jobs("c1", [_job(1, "RUNNING"), _job(2)])
    store.upsert_jobs("c1", [_job(1), _job(2)])  # the same records again: updated, never duplicated
    rows = store.query_jobs(JobQuery(cluster="c1"))
    assert [(r["job_id"], r["state"]) for r in rows] == [(1, "COMPLETED"), (2, "COMPLETED")]
    assert rows[0]["node_list"] == "n[01-02]" and rows[0]["alloc_cpus"] == 8
    assert [s["step_id"] for s in rows[0]["steps"]] == ["batch"]
    step = rows[0]["steps"][0]
    assert step["total_cpu_s"] == pytest.approx(12.5) and step["user_cpu_s"] == pytest.approx(10.0)
    assert (step["max_rss_kb"], step["max_rss_node"], step["disk_write_b"], step["max_pages"]) == (2048, "n01", 8192, 3)


def test_queries_filter_like_sacct(store: AccountingStore) -> None:
    store.upsert_jobs("c1", [_job(1), _job(2, "FAILED"), _job(3, user="bob")])
    store.upsert_jobs("c2", [_job(1)])
    assert {r["job_id"] for r in store.query_jobs(JobQuery(cluster="c1", states=("FAILED",)))} == {2}
    assert {r["job_id"] for r in store.query_jobs(JobQuery(cluster="c1", users=("bob",)))} == {3}
    assert {r["job_id"] for r in store.query_jobs(JobQuery(cluster="c1", job_ids=(2,)))} == {2}
    assert store.query_jobs(JobQuery(cluster="c1", start=5000.0)) == []
    assert len(store.query_jobs(JobQuery(cluster="c2"))) == 1


def test_node_events(store: AccountingStore) -> None:
    store.add_node_events([{"cluster": "c1", "node": "n01", "state": "DOWN", "reason": "Not responding",
                            "time": 5.0}])
    assert store.node_events("c1") == [{"node": "n01", "state": "DOWN", "reason": "Not responding", "uid": 0,
                                        "time": 5.0}]


@pytest.mark.e2e
def test_controller_accounts_into_each_database(db_url: str, tmp_path) -> None:
    from wattsched.harness.testing import Cluster

    cluster = Cluster(tmp_path / "c", nodes=2, accounting_url=db_url).start()
    try:
        job_id = cluster.sbatch("--wrap", "true")
        rows = cluster.accounted(job_id)
        assert rows[0]["state"] == "COMPLETED"
        assert "COMPLETED" in cluster.run("sacct", "-j", str(job_id), "-X", "-n").stdout
    finally:
        cluster.stop()


def _snapshot(store: AccountingStore) -> tuple:
    assocs = store.assocs("c1")
    return assocs.associations(), assocs.accounts(), assocs.users()


def test_sacctmgr_round_trip_and_refusals_leave_the_database_unchanged(store: AccountingStore) -> None:
    from wattsched.accounting.assoc import AssocError

    assocs = store.assocs("c1")
    assocs.add_account("phys", "root", 10, "physics", "uni")
    assocs.add_account("theory", "phys", 2)
    assocs.add_user("alice", "phys,theory", "theory", 3)
    assocs.modify_account("phys", {"fairshare": "20"})
    assocs.modify_user("alice", {"fairshare": "5"}, account="phys")
    tree = {(a["account"], a["user"]): (a["parent"], a["shares"]) for a in assocs.associations()}
    assert tree[("phys", "")] == ("root", 20) and tree[("theory", "")] == ("phys", 2)
    assert tree[("phys", "alice")][1] == 5 and tree[("theory", "alice")][1] == 3
    assert {u["name"]: u["default_account"] for u in assocs.users()}["alice"] == "theory"
    before = _snapshot(store)
    bad = [
        (lambda: assocs.add_account("chem", "nowhere"), "Parent account nowhere doesn't exist"),
        (lambda: assocs.add_account("chem", "root", -1), "Invalid Fairshare value"),
        (lambda: assocs.add_account("phys"), "already exists"),
        (lambda: assocs.add_user("alice", "phys"), "Nothing new added"),
        (lambda: assocs.add_user("bob", "nowhere"), "Account nowhere doesn't exist"),
        (lambda: assocs.add_user("bob", "phys", admin_level="King"), "Invalid AdminLevel"),
        (lambda: assocs.modify_account("phys", {"parent": "theory"}), "loop"),
        (lambda: assocs.modify_user("alice", {"defaultaccount": "root"}), "no association"),
        (lambda: assocs.delete_account("phys"), "still has users"),
        (lambda: assocs.delete_user("carol"), "doesn't exist"),
    ]
    for call, message in bad:
        with pytest.raises(AssocError, match=message):
            call()
        assert _snapshot(store) == before, message
    assocs.delete_user("alice", "theory")
    assert {u["name"]: u["default_account"] for u in assocs.users()}["alice"] == "phys"
    assocs.delete_user("alice")
    assocs.delete_account("theory")
    assert {(a["account"], a["user"]) for a in assocs.associations()} == {("root", ""), ("root", "root"),
                                                                          ("phys", "")}


def test_usage_records_come_from_finished_jobs(store: AccountingStore) -> None:
    store.upsert_jobs("c1", [_job(1, account="phys", consumed_energy_j=5000), _job(2, state="RUNNING", end_time=0.0)])
    records = store.assocs("c1").usage_records(since=0)
    assert [(r.user, r.account, r.cpus, r.start, r.end, r.energy_j) for r in records] == [
        ("alice", "phys", 8, 1010.0, 1070.0, 5000.0)]


def test_a_record_the_database_refuses_still_counts_and_the_others_flow_on(store: AccountingStore,
                                                                          tmp_path) -> None:
    """Records no database takes as they are (a priority beyond any integer column, a NUL in a comment,
    a lone surrogate in a name) among good ones: the good ones all arrive unchanged, the others arrive
    salvaged with their usage (the NUL kept where the database takes it), and nothing is set aside."""
    from wattsched.controller.acctsync import AccountingSync
    from wattsched.controller.store import StateStore

    state = StateStore(str(tmp_path / "ctld"))
    good = [_job(i) for i in (1, 2, 4, 5)]
    bad = [_job(3, priority=2**70), _job(7, comment="x\u0000y"), _job(8, name="n\udc80", wckey="w" * 300)]
    state.commit([*good[:2], *bad, *good[2:]])
    sync = AccountingSync(state, store, "c1")
    assert sync.sync_once() == 7
    rows = {r["job_id"]: r for r in store.query_jobs(JobQuery(cluster="c1"))}
    assert sorted(rows) == [1, 2, 3, 4, 5, 7, 8]
    assert rows[3]["priority"] == 2**63 - 1 and rows[7]["comment"] in ("xy", "x\x00y") and rows[8]["name"] == "n?"
    assert all(rows[j]["alloc_cpus"] == 8 and rows[j]["time_end"] == 1070.0 for j in (3, 7, 8))
    assert rows[1]["name"] == "job1" and state.backlog() == 0 and state.rejected_count() == 0
    state.commit([_job(6)])  # later records are not held up
    sync.sync_once()
    assert 6 in {r["job_id"] for r in store.query_jobs(JobQuery(cluster="c1"))}


def test_writes_while_the_database_is_away_stay_in_the_outbox(tmp_path) -> None:
    """A database that does not answer is not a bad record: nothing is set aside, everything waits."""
    from wattsched.controller.acctsync import AccountingSync
    from wattsched.controller.store import StateStore

    state = StateStore(str(tmp_path / "ctld"))
    state.commit([_job(1), _job(2)])
    away = AccountingStore("postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(Exception):  # noqa: B017 - whatever the driver raises for a refused connection
        AccountingSync(state, away, "c1").sync_once()
    assert state.backlog() == 2 and state.rejected_count() == 0


def test_nosteps_and_nojobs_keep_records_out_of_the_database(store: AccountingStore, tmp_path) -> None:
    """AccountingStorageEnforce=nosteps stores jobs without their steps; nojobs stores no job; either
    way the outbox is drained, so nothing piles up waiting for a write that never comes."""
    from wattsched.controller.acctsync import AccountingSync
    from wattsched.controller.store import StateStore

    for enforce, expected in ((("associations", "nosteps"), {1: []}), (("nojobs",), {})):
        state = StateStore(str(tmp_path / enforce[-1]))
        state.commit([_job(1)])
        assert AccountingSync(state, store, enforce[-1], enforce).sync_once() == 1
        rows = store.query_jobs(JobQuery(cluster=enforce[-1]))
        assert {r["job_id"]: [s["step_id"] for s in r["steps"]] for r in rows} == expected
        assert state.backlog() == 0


def test_the_migrations_are_a_chain_numbered_as_their_files_and_the_caller_never_loads_alembic(
        db_url: str) -> None:
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    from wattsched.accounting import store as store_mod

    config = AlembicConfig()
    config.set_main_option("script_location", store_mod._MIGRATIONS)
    scripts = ScriptDirectory.from_config(config)
    assert scripts.get_heads() == [store_mod.head_revision()]
    for script in scripts.walk_revisions():
        assert script.path is not None and script.path.split("/")[-1][:4] == script.revision
        if script.down_revision is not None:
            assert int(script.down_revision) == int(script.revision) - 1
    probe = ("import sys; from wattsched.accounting import store; engine = store.engine_for(sys.argv[1]); "
             "store.migrate(engine); print(store.schema_revision(engine), 'alembic' in sys.modules)")
    first = subprocess.run([sys.executable, "-c", probe, db_url], capture_output=True, text=True, check=True)
    # a new database: migrated, by a forked child (the controller keeps no Alembic in memory)
    assert first.stdout.split() == [store_mod.head_revision(), "False"]
    again = subprocess.run([sys.executable, "-c", probe, db_url], capture_output=True, text=True, check=True)
    assert again.stdout.split() == [store_mod.head_revision(), "False"]  # at head: Alembic not loaded


def test_a_migration_that_fails_in_its_child_is_raised_with_the_childs_reason(tmp_path: Path) -> None:
    from wattsched.accounting import store as store_mod

    engine = store_mod.engine_for(f"sqlite:///{tmp_path / 'acct.db'}")
    with engine.begin() as conn:  # a schema from a newer wattsched than this one
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('9999')"))
    with pytest.raises(store_mod.MigrationError, match="9999"):
        store_mod.migrate(engine)
    assert store_mod.schema_revision(engine) == "9999"  # the parent's own engine still answers
