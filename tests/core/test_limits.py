"""The pure limits (wattsched.limits): TRES settings, Slurm's reasons, the ledger's verdicts in a
pass, recorded use, and the submit limits."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from wattsched import ledger, limits
from wattsched.limits import AccountsSnap, Ask, AssocLimits, Limits, Qos, UseRecord
from wattsched.scheduling.records import JobRequest, RunningJob
from wattsched.scheduling.throttle import Throttle, limits_ask

ON = frozenset({"associations", "limits", "qos"})


def _tree(**account_limits: Limits) -> dict[tuple[str, str], AssocLimits]:
    """root > proj > (alice, bob), proj's limits as given."""
    return {("root", ""): AssocLimits("root", "", ""),
            ("proj", ""): AssocLimits("proj", "", "root", account_limits.get("proj", Limits())),
            ("proj", "alice"): AssocLimits("proj", "alice", "proj", account_limits.get("alice", Limits())),
            ("proj", "bob"): AssocLimits("proj", "bob", "proj")}


def _job(job_id: int, user: str = "alice", qos: str = "normal", ntasks: int = 1, minutes: int | None = 10,
         partition: str = "debug") -> JobRequest:
    return JobRequest(job_id, user, partition, 0.0, ntasks=ntasks, account="proj", qos=qos, time_limit_min=minutes)


def _pass(snap: AccountsSnap, jobs: list[JobRequest], fairshare=None) -> dict[int, str | None]:
    """Each job's verdict, in order, the allowed ones started as a pass would."""
    throttle = Throttle({}, snap, 0.0, fairshare or {})
    verdicts = {}
    for job in jobs:
        verdicts[job.job_id] = throttle.refusal(job)
        if verdicts[job.job_id] is None:
            throttle.started(job)
    return verdicts


def test_tres_settings_parse_and_show_as_sacctmgr() -> None:
    assert limits.parse_tres("cpu=10,mem=20G,gres/gpu:a100=2,power=3000") == \
        {"cpu": 10, "mem": 20480, "gres/gpu": 2, "power": 3000}
    assert limits.parse_tres("energy=1.44e11", over_time=True) == {"energy": 144_000_000_000}
    assert limits.format_tres({"mem": 20480, "cpu": 10}) == "cpu=10,mem=20G"
    assert limits.parse_tres("cpu=-1") == {"cpu": limits.UNLIMITED}
    for bad, over_time in (("bogus=1", False), ("cpu", False), ("cpu=1G", False), ("energy=5", False),
                           ("power=5", True), ("cpu=1e30", False)):
        with pytest.raises(limits.LimitError):
            limits.parse_tres(bad, over_time)
    assert limits.parse_minutes("1-00:00:00") == 1440 and limits.format_minutes(1440) == "1-00:00:00"
    assert Limits(grp_jobs=3, grp_tres={"cpu": 4}).changed({"grp_jobs": -1, "grp_tres": {"cpu": -1, "mem": 5}}) \
        == Limits(grp_tres={"mem": 5})


@pytest.mark.parametrize(("owner", "kind", "tres", "slurm"), [
    ("Assoc", "grp", "cpu", "AssocGrpCpuLimit"), ("Assoc", "grp", "mem", "AssocGrpMemLimit"),
    ("Assoc", "grp", "energy", "AssocGrpEnergy"), ("Assoc", "grp_mins", "cpu", "AssocGrpCPUMinutesLimit"),
    ("Assoc", "grp_mins", "energy", "AssocGrpEnergyMinutes"), ("Assoc", "grp_mins", "mem", "AssocGrpMemMinutes"),
    ("Assoc", "grp_run_mins", "cpu", "AssocGrpCPURunMinutesLimit"),
    ("Assoc", "per_job", "cpu", "AssocMaxCpuPerJobLimit"), ("Assoc", "per_job", "mem", "AssocMaxMemPerJob"),
    ("Assoc", "mins_per_job", "cpu", "AssocMaxCpuMinutesPerJobLimit"),
    ("QOS", "grp", "mem", "QOSGrpMemLimit"), ("QOS", "grp_mins", "mem", "QOSGrpMemoryMinutes"),
    ("QOS", "per_job", "node", "QOSMaxNodePerJobLimit"), ("QOS", "per_job", "mem", "QOSMaxMemoryPerJob"),
    ("QOS", "per_node", "cpu", "QOSMaxCpuPerNode"), ("QOS", "per_user", "cpu", "QOSMaxCpuPerUserLimit"),
    ("QOS", "per_user", "energy", "QOSMaxEnergyPerUser"), ("QOS", "per_account", "mem", "MaxMemoryPerAccount"),
    ("QOS", "min_per_job", "cpu", "QOSMinCpuNotSatisfied"), ("QOS", "grp", "gres/gpu", "QOSGrpGRES"),
    ("QOS", "grp_run_mins", "energy", "QOSGrpEnergyRunMinutes"), ("QOS", "grp", "power", "QOSGrpPower"),
])
def test_reasons_are_slurms(owner: str, kind: str, tres: str, slurm: str) -> None:
    assert limits.reason(owner, kind, tres) == slurm


def test_a_qos_max_jobs_per_user_holds_within_one_pass() -> None:
    qos = {"normal": Qos("normal"), "capped": Qos("capped", limits=Limits(max_jobs=2))}
    snap = AccountsSnap(qos, _tree(), enforce=ON)
    verdicts = _pass(snap, [*(_job(i, qos="capped") for i in range(4)), _job(9, "bob", "capped")])
    assert list(verdicts.values()) == [None, None, "QOSMaxJobsPerUserLimit", "QOSMaxJobsPerUserLimit", None]
    # the running ones count too
    active = tuple(limits.ActiveJob(100 + i, "alice", "proj", "capped", {"cpu": 1}, None) for i in range(2))
    busy = AccountsSnap(qos, _tree(), active=active, enforce=ON)
    assert _pass(busy, [_job(1, qos="capped")]) == {1: "QOSMaxJobsPerUserLimit"}
    # with limits off, nothing is held back
    off = AccountsSnap(qos, _tree(), active=active, enforce=frozenset({"associations"}))
    assert _pass(off, [_job(1, qos="capped")]) == {1: None}


def test_group_limits_hold_the_account_and_all_below_it() -> None:
    snap = AccountsSnap({"normal": Qos("normal")}, _tree(proj=Limits(grp_tres={"cpu": 4})), enforce=ON)
    verdicts = _pass(snap, [_job(1, ntasks=3), _job(2, "bob", ntasks=2), _job(3, "bob", ntasks=1), _job(4)])
    assert verdicts == {1: None, 2: "AssocGrpCpuLimit", 3: None, 4: "AssocGrpCpuLimit"}
    snap = AccountsSnap({"normal": Qos("normal")}, _tree(proj=Limits(grp_jobs=2)), enforce=ON)
    assert list(_pass(snap, [_job(1), _job(2, "bob"), _job(3)]).values()) == [None, None, "AssocGrpJobsLimit"]


def test_max_limits_are_inherited_from_the_nearest_association() -> None:
    tree = _tree(proj=Limits(max_jobs=1, max_wall=30), alice=Limits(max_jobs=3))
    snap = AccountsSnap({"normal": Qos("normal")}, tree, enforce=ON)
    # alice sets her own MaxJobs; bob inherits the account's
    assert list(_pass(snap, [_job(1), _job(2), _job(3), _job(4)]).values()) == [None, None, None, "AssocMaxJobsLimit"]
    assert list(_pass(snap, [_job(1, "bob"), _job(2, "bob")]).values()) == [None, "AssocMaxJobsLimit"]
    assert _pass(snap, [_job(1, minutes=60)]) == {1: "AssocMaxWallDurationPerJobLimit"}
    assert _pass(snap, [_job(1, minutes=None)]) == {1: "AssocMaxWallDurationPerJobLimit"}


def test_an_energy_budget_counts_recorded_joules_and_safe_counts_the_worst_case() -> None:
    budget = Limits(grp_tres_mins={"energy": 1_000_000})
    tree = _tree(proj=budget)
    qos = {"normal": Qos("normal")}
    used, _q = limits.recorded_use([UseRecord("bob", "proj", "normal", {"cpu": 4}, 0.0, 600.0, 3e6)], tree, qos,
                                   now=600.0, since=0.0, half_life_s=0.0)
    assert used[("proj", "")].tres_mins["energy"] == pytest.approx(3e6)
    assert used[("proj", "")].tres_mins["cpu"] == pytest.approx(40.0)  # 4 CPUs for 10 minutes
    assert used[("root", "")].tres_mins["energy"] == pytest.approx(3e6)  # the tree above counts it too
    over = AccountsSnap(qos, tree, used, enforce=ON, watts_per_cpu={"debug": 100.0})
    assert _pass(over, [_job(1)]) == {1: "AssocGrpEnergyMinutes"}
    # half used: without safe any job starts; with safe only one whose power x time limit fits
    half = {("proj", ""): limits.Use({"energy": 500_000.0})}
    loose = AccountsSnap(qos, tree, half, enforce=ON, watts_per_cpu={"debug": 100.0})
    assert _pass(loose, [_job(1, minutes=600)]) == {1: None}
    safe = AccountsSnap(qos, tree, half, enforce=ON | {"safe"}, watts_per_cpu={"debug": 100.0})
    # 100 W for 60 min = 360 kJ fits the 500 kJ left; 120 min = 720 kJ does not; unlimited never does
    assert _pass(safe, [_job(1, minutes=60)]) == {1: None}
    assert _pass(safe, [_job(1, minutes=120)]) == {1: "AssocGrpEnergyMinutes"}
    assert _pass(safe, [_job(1, minutes=None)]) == {1: "AssocGrpEnergyMinutes"}


def test_power_as_a_tres_keeps_a_qos_under_its_watts() -> None:
    qos = {"normal": Qos("normal", limits=Limits(grp_tres={"power": 1000}))}
    snap = AccountsSnap(qos, _tree(), enforce=ON, watts_per_cpu={"debug": 100.0})
    verdicts = _pass(snap, [_job(1, ntasks=6), _job(2, ntasks=5), _job(3, ntasks=4)])
    assert verdicts == {1: None, 2: "QOSGrpPower", 3: None}


def test_usage_factor_and_threshold() -> None:
    qos = {"cheap": Qos("cheap", usage_factor=0.5), "picky": Qos("picky", usage_threshold=0.5)}
    _a, by_qos = limits.recorded_use([UseRecord("alice", "proj", "cheap", {"cpu": 2}, 0.0, 600.0)], _tree(), qos,
                                     600.0, 0.0, 0.0)
    assert by_qos["cheap"].tres_mins["cpu"] == pytest.approx(10.0)  # 2 CPUs x 10 min x 0.5
    snap = AccountsSnap(qos, _tree(), enforce=ON)
    assert _pass(snap, [_job(1, qos="picky")], {("proj", "alice"): (0.2, 1.0)}) == {1: "QOSUsageThreshold"}
    assert _pass(snap, [_job(1, qos="picky")], {("proj", "alice"): (0.8, 1.0)}) == {1: None}
    assert _pass(snap, [_job(1, qos="gone")]) == {1: "InvalidQOS"}


def test_submit_limits_and_default_qos() -> None:
    qos = {"normal": Qos("normal"), "few": Qos("few", limits=Limits(max_submit=2, grp_submit=3))}
    tree = _tree(proj=Limits(grp_submit=10))
    snap = AccountsSnap(qos, tree)
    ask = Ask("alice", "proj", "few", {"cpu": 1}, {"cpu": 1}, 10)
    assert ledger.submit_refusal(snap, ask, 1, 0, {}, {"few": 0}, {"few": 1}, {"few": 1}) is None
    assert ledger.submit_refusal(snap, ask, 1, 0, {}, {"few": 0}, {"few": 2}, {"few": 2}) == limits.SUBMIT_REFUSED
    assert ledger.submit_refusal(snap, ask, 1, 0, {}, {"few": 3}, {}, {}) == limits.SUBMIT_REFUSED
    assert ledger.submit_refusal(snap, ask, 5, 0, {"proj": 6}, {}, {}, {}) is not None  # an array of 5
    # a partition's QOS holds the partition's jobs whatever their own QOS
    in_part = Ask("alice", "proj", "normal", {"cpu": 1}, {"cpu": 1}, 10, partition="debug")
    ruled = AccountsSnap(qos, tree, partition_qos={"debug": "few"})
    assert ledger.submit_refusal(ruled, in_part, 1, 0, {}, {}, {"few": 1}, {}) is None
    assert ledger.submit_refusal(ruled, in_part, 1, 0, {}, {}, {"few": 2}, {}) == limits.SUBMIT_REFUSED
    assert ledger.submit_refusal(snap, in_part, 1, 0, {}, {}, {"few": 2}, {}) is None
    deny = {"normal": Qos("normal"), "few": Qos("few", flags=frozenset({"DenyOnLimit"}),
                                                limits=Limits(max_tres_per_job={"cpu": 1}))}
    big = Ask("alice", "proj", "normal", {"cpu": 2}, {"cpu": 2}, 10, partition="debug")
    assert ledger.per_job_refusal(AccountsSnap(deny, tree, partition_qos={"debug": "few"}), big) is not None
    assert ledger.per_job_refusal(AccountsSnap(deny, tree), big) is None
    assert snap.default_qos("proj", "alice") == "normal"
    assert snap.allowed_qos("proj", "alice") == {"normal"}
    picky = {**tree, ("proj", "alice"): AssocLimits("proj", "alice", "proj", qos=frozenset({"few"}))}
    assert AccountsSnap(qos, picky).default_qos("proj", "alice") == "few"


def test_worst_case_of_an_unlimited_job_is_infinite() -> None:
    ask = limits_ask(_job(1, minutes=None), 100.0)
    assert ask.tres["power"] == 100 and math.isinf(ledger._worst_minutes("energy", ask))


def test_qos_flags_partition_time_limit_no_reserve() -> None:
    from wattsched.plugins.priority.basic import BasicPriority
    from wattsched.plugins.sched.backfill import BackfillScheduler
    from wattsched.plugins.select.cons_tres import ConsTresSelect
    from wattsched.scheduling.cycle import schedule
    from wattsched.scheduling.records import NodeSnap, PartitionSnap, Snapshot

    qos = {"normal": Qos("normal"), "long": Qos("long", flags=frozenset({"PartitionTimeLimit"})),
           "filler": Qos("filler", flags=frozenset({"NoReserve"}))}
    accounts = AccountsSnap(qos, _tree(), enforce=ON)
    nodes = (NodeSnap("n1", 4, 0, 1000, 1000), NodeSnap("n2", 4, 4, 1000, 1000))
    running = (RunningJob(99, {"n1": 4}, {"n1": 0}, 600.0),)
    part = {"debug": PartitionSnap("debug", ("n1", "n2"), max_time_min=60)}

    def decide(*jobs: JobRequest):
        snap = Snapshot(now=0.0, nodes=nodes, partitions=part, pending=jobs, running=running, accounts=accounts)
        return schedule(snap, BasicPriority(), BackfillScheduler(), ConsTresSelect())

    # over the partition's MaxTime: held, unless its QOS may go over it
    assert decide(_job(1, minutes=120)).reasons[1] == "PartitionTimeLimit"
    assert [s[0] for s in decide(_job(1, qos="long", minutes=120)).starts] == [1]
    # a job that needs both nodes waits for n1 (free at 600 s); with NoReserve nothing is kept for it,
    # so a long job behind it takes n2 now and it gets no expected start
    big, long_small = _job(1, ntasks=8, minutes=10), _job(2, ntasks=4, minutes=50)
    kept = decide(big, long_small)
    assert 1 in kept.expected_start and not kept.starts
    free = decide(replace(big, qos="filler"), long_small)
    assert 1 not in free.expected_start and [s[0] for s in free.starts] == [2]


def test_a_power_share_is_planned_in_the_backfill_timeline() -> None:
    from wattsched.plugins.priority.basic import BasicPriority
    from wattsched.plugins.sched.backfill import BackfillScheduler
    from wattsched.plugins.select.cons_tres import ConsTresSelect
    from wattsched.scheduling.cycle import schedule
    from wattsched.scheduling.records import NodeSnap, PartitionSnap, Snapshot

    qos = {"normal": Qos("normal", limits=Limits(grp_tres={"power": 1000}))}
    # a running job of the QOS draws 300 W until 600 s (it is elsewhere: these nodes are free)
    active = (limits.ActiveJob(99, "bob", "proj", "normal", {"power": 300}, 600.0),)
    accounts = AccountsSnap(qos, _tree(), active=active, enforce=ON, watts_per_cpu={"debug": 50.0})
    nodes = tuple(NodeSnap(f"n{i}", 8, 8, 1000, 1000) for i in range(3))
    part = {"debug": PartitionSnap("debug", tuple(n.name for n in nodes))}

    def decide(*jobs: JobRequest):
        snap = Snapshot(now=0.0, nodes=nodes, partitions=part, pending=jobs, accounts=accounts)
        return schedule(snap, BasicPriority(), BackfillScheduler(), ConsTresSelect())

    big = _job(1, ntasks=16, minutes=10)  # 800 W: over the share now, it fits once the 300 W are gone
    later = _job(2, ntasks=5, minutes=60)  # 250 W for an hour: it would eat into the big job's share
    short = _job(3, ntasks=5, minutes=5)  # 250 W, done before 600 s
    decisions = decide(big, later, short)
    assert decisions.reasons[1] == "QOSGrpPower" and decisions.expected_start[1] == 600.0
    assert decisions.reasons[2] == "QOSGrpPower"  # it starts after the big job's reservation, not now
    assert [s[0] for s in decisions.starts] == [3]


def test_qos_plus_on_a_new_association_extends_what_it_inherits(tmp_path) -> None:
    from wattsched.accounting.store import AccountingStore

    store = AccountingStore(f"sqlite:///{tmp_path / 'acct.db'}")
    store.setup("c", 0.0)
    assocs = store.assocs("c")
    assocs.add_qos("capped", {})
    assocs.add_qos("high", {})
    assocs.add_account("physics", settings={"qos": "normal,high", "defaultqos": "normal"})
    assocs.add_user("alice", "physics", settings={"qos+": "capped"})
    assocs.add_account("chem")
    assocs.add_user("bob", "chem", settings={"qos+": "capped", "qos-": "normal"})
    qos = {(r["account"], r["user"]): r["qos"] for r in assocs.associations()}
    store.close()
    assert qos[("physics", "alice")] == ["normal", "high", "capped"]  # the account's list, plus capped
    assert qos[("chem", "bob")] == ["capped"]  # root's normal, plus capped, minus normal


def test_running_jobs_of_a_group_past_its_budget_are_ended() -> None:
    qos = {"normal": Qos("normal"), "metered": Qos("metered", limits=Limits(grp_tres_mins={"energy": 1000}))}
    tree = _tree(proj=Limits(grp_tres_mins={"cpu": 60}), alice=Limits(grp_wall=30))
    active = (limits.ActiveJob(1, "alice", "proj", "normal", {"cpu": 4}, None),
              limits.ActiveJob(2, "bob", "proj", "metered", {"cpu": 4}, None),
              limits.ActiveJob(3, "bob", "other", "normal", {"cpu": 4}, None))
    use = {("proj", ""): limits.Use({"cpu": 30.0}), ("proj", "alice"): limits.Use({"cpu": 30.0}, wall_mins=31.0)}
    snap = AccountsSnap(qos, tree, use, {"metered": limits.Use({"energy": 1000.0})}, active, ON)
    # alice's own wall budget, bob's QOS's energy budget; the job elsewhere is left alone
    assert ledger.overrun(snap) == {1: "AssocGrpWallLimit", 2: "QOSGrpEnergyMinutes"}
    spent = replace(snap, assoc_use={("proj", ""): limits.Use({"cpu": 60.0})}, qos_use={})
    assert ledger.overrun(spent) == {1: "AssocGrpCPUMinutesLimit", 2: "AssocGrpCPUMinutesLimit"}
    # under safe a job started only because its worst case fitted: it runs on
    assert ledger.overrun(replace(spent, enforce=ON | {"safe"})) == {}
    assert ledger.overrun(replace(spent, enforce=frozenset({"associations"}))) == {}
