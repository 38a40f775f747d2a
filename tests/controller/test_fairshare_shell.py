"""The fair-share shell counts every job's use exactly once, whichever side of the accounting
outbox its record is on: a job the controller holds counts as it holds it, a job it let go as
accounting recorded it. The controller's own state machine runs in process on a virtual clock,
against a real state store and a real SQLite accounting database."""

from __future__ import annotations

import pytest

from wattsched import auth, config
from wattsched.accounting.store import AccountingStore
from wattsched.api import AgentHeartbeat, JobEvent, JobSubmit, NodeReport
from wattsched.auth import Identity
from wattsched.controller import jobend, jobs, launching, priority, statesave
from wattsched.controller import nodes as nodes_mod
from wattsched.controller.acctsync import AccountingSync
from wattsched.controller.startup import load_plugins, open_state
from wattsched.controller.store import StateStore

EPOCH = 1_800_000_000.0
ALICE = Identity(1000, "alice")


def _usage(shares: priority.Shares) -> float:
    """The CPU-seconds counted to alice in account phys (undecayed: the half-life is long)."""
    def walk(rows):
        for row in rows:
            yield row
            yield from walk(row.children)
    return next(r.raw_usage for r in walk(shares.rows) if (r.account, r.user) == ("phys", "alice"))


def test_an_ended_job_counts_once_before_during_and_after_its_record_reaches_accounting(tmp_path) -> None:
    path = tmp_path / "shell.conf"
    path.write_text(f"StateSaveLocation={tmp_path / 'ctld'}\nSlurmdSpoolDir={tmp_path / 'spool'}\n"
                    "PriorityType=priority/multifactor\nPriorityDecayHalfLife=7-0\n"
                    "NodeName=n[1-2] CPUs=4 RealMemory=1000\nPartitionName=p Nodes=n[1-2] Default=YES\n")
    conf = config.load(path)
    accounting = AccountingStore(f"sqlite:///{tmp_path / 'acct.db'}")
    accounting.setup(conf.cluster_name, EPOCH - 100)
    assocs = accounting.assocs(conf.cluster_name)
    assocs.add_account("phys")
    assocs.add_user("alice", "phys", "phys")
    store = StateStore(str(tmp_path / "ctld"))
    state = open_state(conf, store, load_plugins(conf), auth.ensure_key(str(tmp_path / "key")), EPOCH)
    nodes_mod.heartbeat(state, AgentHeartbeat(agent_url="http://agent", boot_time=EPOCH, nodes=[
        NodeReport(name=n.name, cpus=n.cpus, real_memory_mb=n.real_memory_mb) for n in conf.nodes]), EPOCH)
    job = jobs.submit(state, JobSubmit(work_dir="/tmp", script="#!/bin/sh\n", ntasks=4, account="phys",
                                       time_limit="10"), ALICE, EPOCH)[0]
    launching.schedule(state, EPOCH)
    assert job.start_time == EPOCH
    running = priority.live_use(state, EPOCH + 60)
    assert _usage(priority.compute(accounting, conf, running, EPOCH + 60, EPOCH - 100)) == pytest.approx(240, rel=1e-3)

    jobend.batch_ended(state, JobEvent(job_id=job.job_id, node=job.alloc.batch_host, exit_code=0, end_time=EPOCH + 100),
                       EPOCH + 100)
    for node in list(job.alloc.completing_nodes):
        jobend.node_clean(state, job.job_id, node)
    statesave.flush(state)  # ended, saved, in the outbox: accounting has not got it yet
    now = EPOCH + 200
    live = priority.live_use(state, now)
    assert live.keys == {(job.job_id, job.submit_time)} and [u.end for u in live.usage] == [EPOCH + 100]
    assert assocs.usage_records(0) == []
    assert _usage(priority.compute(accounting, conf, live, now, EPOCH - 100)) == pytest.approx(400, rel=1e-3)

    sync = AccountingSync(store, accounting, conf.cluster_name)
    sync.flush()  # now on both sides: still once
    assert len(assocs.usage_records(0)) == 1 and assocs.usage_records(0, live.keys) == []
    assert _usage(priority.compute(accounting, conf, live, now, EPOCH - 100)) == pytest.approx(400, rel=1e-3)

    jobend.purge(state, job)  # let go: counted from accounting alone
    statesave.flush(state)
    gone = priority.live_use(state, now)
    assert gone.keys == frozenset()
    assert _usage(priority.compute(accounting, conf, gone, now, EPOCH - 100, sync.flush)) == pytest.approx(
        400, rel=1e-3)
    accounting.close()
