"""FairShare and EnergyFairShare on the seed's worked numbers (000, section III-B)."""

from __future__ import annotations

import math

import pytest

from wattsched.fairshare import Assoc, UsageRecord, decayed_seconds, factors, raw_usage, tree_rows

HOUR = 3600.0
NOW = 1_000 * HOUR


def _row(rows, account, user=""):
    return next(r for r in rows if r.account == account and r.user == user)


def test_paper_example_normalized_usage_is_0_3() -> None:
    """m = 50 CPUs, only the last 100 h count (D = 0), 5 jobs x 30 h x 10 CPUs: U = 0.3."""
    since = NOW - 100 * HOUR
    jobs = [UsageRecord("u", "a", 10, since + i * 10 * HOUR, since + i * 10 * HOUR + 30 * HOUR) for i in range(5)]
    usage = raw_usage(jobs, NOW, half_life_s=0, since=since)
    assert usage[("a", "u")][0] == pytest.approx(5 * 30 * 10 * HOUR)
    capacity = 50 * decayed_seconds(since, NOW, NOW, 0)
    rows = tree_rows([Assoc("a"), Assoc("a", "u")], usage, capacity, 1.0)
    assert _row(rows, "a", "u").effective_usage == pytest.approx(0.3)
    assert _row(rows, "a", "u").fairshare == pytest.approx(2 ** -0.3)


def test_factor_is_one_without_usage_half_at_share_and_near_zero_far_above() -> None:
    assocs = [Assoc("a"), Assoc("b"), Assoc("a", "u"), Assoc("b", "v")]  # S = 0.5 each
    idle = tree_rows(assocs, {}, 100.0, 100.0)
    assert _row(idle, "a", "u").fairshare == 1.0
    at_share = tree_rows(assocs, {("a", "u"): (50.0, 0.0)}, 100.0, 100.0)
    assert _row(at_share, "a", "u").norm_shares == 0.5
    assert _row(at_share, "a", "u").fairshare == pytest.approx(0.5)
    assert _row(at_share, "b", "v").fairshare == 1.0
    greedy = tree_rows(assocs, {("a", "u"): (1000.0, 0.0)}, 100.0, 100.0)
    assert _row(greedy, "a", "u").fairshare < 1e-5


def test_damping_factor_softens() -> None:
    assocs = [Assoc("a"), Assoc("b"), Assoc("a", "u"), Assoc("b", "v")]
    rows = tree_rows(assocs, {("a", "u"): (50.0, 0.0)}, 100.0, 100.0, damping=2.0)
    assert _row(rows, "a", "u").fairshare == pytest.approx(2 ** -0.5)


def test_usage_halves_after_one_half_life_for_cpu_and_energy() -> None:
    week = 7 * 86400.0
    job = UsageRecord("u", "a", 4, NOW - 10, NOW, energy_j=1000.0)
    fresh = raw_usage([job], NOW, week, since=0)[("a", "u")]
    later = raw_usage([job], NOW + week, week, since=0)[("a", "u")]
    assert later[0] == pytest.approx(fresh[0] / 2, rel=1e-9)
    assert later[1] == pytest.approx(fresh[1] / 2, rel=1e-9)
    assert fresh[1] == pytest.approx(1000.0, rel=1e-3)


def test_running_jobs_accrue_and_reset_period_cuts_old_use() -> None:
    running = UsageRecord("u", "a", 2, NOW - HOUR, None)
    assert raw_usage([running], NOW, 0, since=0)[("a", "u")][0] == pytest.approx(2 * HOUR)
    assert raw_usage([running], NOW, 0, since=NOW - 0.5 * HOUR)[("a", "u")][0] == pytest.approx(HOUR)


def test_energy_fairshare_follows_joules_not_cpu_seconds() -> None:
    """Three users, identical CPU use, energy 0.7x, 1x, 1.3x: FS ranks them alike, EFS greenest first."""
    assocs = [Assoc("a")] + [Assoc("a", u) for u in ("green", "normal", "glutton")]
    jobs = [UsageRecord(u, "a", 8, NOW - HOUR, NOW, energy_j=e)
            for u, e in (("green", 0.7e6), ("normal", 1.0e6), ("glutton", 1.3e6))]
    usage = raw_usage(jobs, NOW, 7 * 86400, since=0)
    rows = tree_rows(assocs, usage, 24 * 10 * HOUR, 3.0e7)
    fs = factors(rows)
    assert fs[("a", "green")][0] == pytest.approx(fs[("a", "glutton")][0])
    assert fs[("a", "green")][1] > fs[("a", "normal")][1] > fs[("a", "glutton")][1]


def test_hierarchy_multiplies_shares_and_fair_tree_ranks_users() -> None:
    assocs = [Assoc("phys", shares=3), Assoc("chem", shares=1), Assoc("theory", parent="phys"),
              Assoc("theory", "ann"), Assoc("phys", "bob"), Assoc("chem", "cy")]
    usage = {("theory", "ann"): (10.0, 0.0), ("phys", "bob"): (1.0, 0.0), ("chem", "cy"): (5.0, 0.0)}
    rows = tree_rows(assocs, usage, 100.0, 100.0, fair_tree=True)
    assert [(r.account, r.user, r.depth) for r in rows] == [
        ("root", "", 0), ("chem", "", 1), ("chem", "cy", 2), ("phys", "", 1), ("phys", "bob", 2),
        ("theory", "", 2), ("theory", "ann", 3)]
    assert _row(rows, "phys").norm_shares == 0.75
    assert _row(rows, "phys", "bob").norm_shares == pytest.approx(0.375)
    assert _row(rows, "theory", "ann").norm_shares == pytest.approx(0.375)
    # phys used 11 of 16 with 3/4 of the shares: LevelFS 1.09 > chem's 0.8; within phys bob wins
    assert _row(rows, "phys").level_fs == pytest.approx(0.75 / (11 / 16))
    fair = factors(rows)
    assert fair[("phys", "bob")][0] == 1.0
    assert fair[("theory", "ann")][0] == pytest.approx(2 / 3)
    assert fair[("chem", "cy")][0] == pytest.approx(1 / 3)
    assert math.isinf(_row(rows, "chem").level_efs)


def test_multifactor_priority_is_the_weighted_sum() -> None:
    from wattsched.config import Config
    from wattsched.plugins.priority.multifactor import MultifactorPriority
    from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, Snapshot

    nodes = tuple(NodeSnap(f"n{i}", 10, 10, 1000, 1000) for i in range(10))  # 100 CPUs
    parts = {"low": PartitionSnap("low", ("n0",), priority_job_factor=1),
             "high": PartitionSnap("high", ("n0",), priority_job_factor=4)}
    week = 7 * 86400

    def job(job_id, **kw):
        return JobRequest(job_id=job_id, user=kw.pop("user", "u"), account="a", partition=kw.pop("partition", "low"),
                          submit_time=kw.pop("submit", NOW), **kw)

    queue = (job(1, submit=NOW - week / 2, ntasks=50), job(2, partition="high", nice=100), job(3, user="v"),
             job(4, hold="user"), job(5, admin_priority=42))
    snapshot = Snapshot(now=NOW, nodes=nodes, partitions=parts, pending=queue,
                        fairshare={("a", "u"): (0.5, 0.2), ("a", "v"): (0.25, 0.8)})
    config = Config(priority_weight_age=1000, priority_weight_job_size=100, priority_weight_partition=400,
                    priority_weight_fairshare=2000, priority_weight_energy=0)
    got = MultifactorPriority(config).breakdown(snapshot)
    assert got[1].age == pytest.approx(0.5) and got[1].job_size == pytest.approx(0.5)
    assert got[1].priority == int(1000 * 0.5 + 100 * 0.5 + 400 * 0.25 + 2000 * 0.5)
    assert got[2].partition_factor == 1.0 and got[2].priority == (1 + 400 + 1000) - 100
    assert got[3].fairshare == 0.25 and got[4].priority == 0 and got[5].priority == 42 == got[5].site
    # FS+EFS: both factors divided by their current maximum
    both = Config(priority_weight_fairshare=1000, priority_weight_energy=1000)
    fs_efs = MultifactorPriority(both).breakdown(snapshot)
    assert fs_efs[1].fairshare == 1.0 and fs_efs[3].fairshare == 0.5
    assert fs_efs[3].energy == 1.0 and fs_efs[1].energy == pytest.approx(0.25)
    # the pass's priorities skip the held job's factors, and are breakdown's all the same
    assert MultifactorPriority(both).priorities(snapshot) == {j: f.priority for j, f in fs_efs.items()}
    small = MultifactorPriority(Config(priority_weight_job_size=100, priority_favor_small=True)).breakdown(snapshot)
    assert small[1].job_size == pytest.approx(0.5) and small[3].job_size == pytest.approx(0.99)


def test_priority_settings_parse(tmp_path) -> None:
    from wattsched import config

    path = tmp_path / "p.conf"
    path.write_text("ClusterName=c\nPriorityType=priority/multifactor\nPriorityDecayHalfLife=14-0\n"
                    "PriorityCalcPeriod=0:30\nPriorityMaxAge=1-0\nPriorityFlags=FAIR_TREE\n"
                    "AccountingStorageEnforce=associations\nPriorityWeightEnergy=500\n"
                    "NodeName=n1 CPUs=1\nPartitionName=p Nodes=n1 PriorityJobFactor=3\n")
    conf = config.load(str(path))
    assert (conf.priority_decay_half_life_min, conf.priority_calc_period_s, conf.priority_max_age_min) == \
        (14 * 1440, 30, 1440)
    assert conf.priority_flags == ("FAIR_TREE",) and conf.priority_weight_energy == 500
    assert conf.partitions[0].priority_job_factor == 3
    path.write_text("ClusterName=c\nPriorityFlags=SOMETIMES\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n")
    with pytest.raises(config.ConfigError, match=r"p.conf:2: PriorityFlags"):
        config.load(str(path))
