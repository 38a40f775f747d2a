"""The simulator: SWF parsing of a real trace, a hand-computed schedule and energy, power saving
in virtual time, determinism, and the command's output and errors."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from pathlib import Path

import pytest

from wattsched import config
from wattsched.harness.testing import BIN
from wattsched.simulator import engine, report, workload
from wattsched.simulator.plotter import PlotError, Plotter, beside
from wattsched.simulator.workload import SimJob, Workload

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
KTH = TRACES / "KTH-SP2-1996-2.1-cln.swf.gz"


def _platform(tmp_path, extra: str = "", nodes: int = 4) -> config.Config:
    path = tmp_path / "p.conf"
    path.write_text(f"SchedulerType=sched/backfill\nSelectType=select/linear\n{extra}\n"
                    f"NodeName=s[1-{nodes}] CPUs=1 IdleWatts=95 MaxWatts=191 PowerSaveWatts=10 "
                    "SwitchOnTime=10 SwitchOffTime=20 SwitchOnWatts=120 SwitchOffWatts=100\n"
                    f"PartitionName=p Nodes=s[1-{nodes}] Default=YES\n")
    return config.load(path)


# Four one-CPU nodes, EASY backfilling:
#   J1 t=0   3 nodes 600 s (limit 600)    starts at once
#   J2 t=10  2 nodes 300 s (limit 600)    one node free: waits, reserved at 600 when J1 ends
#   J3 t=20  1 node  300 s (limit 300)    backfilled on the free node: ends at 320, before 600
#   J4 t=30  1 node  1200 s (limit 1200)  no node until J3 ends at 320; there, at 600 J2 needs 2 of
#                                         the 4 nodes then free, so J4 backfills at 320
HAND = [SimJob(1, 0, 600, 600, 3), SimJob(2, 10, 300, 600, 2), SimJob(3, 20, 300, 300, 1),
        SimJob(4, 30, 1200, 1200, 1)]
HAND_STARTS = {1: 0.0, 2: 600.0, 3: 20.0, 4: 320.0}


def test_a_hand_built_workload_runs_as_computed_by_hand(tmp_path) -> None:
    # backfilling at every event, as in the seeds' simulators
    result = engine.Simulation(_platform(tmp_path, "SchedulerParameters=bf_interval=1"),
                               Workload(list(HAND))).run()
    starts = {r.job.job_id: r.start for r in result.records}
    assert starts == HAND_STARTS
    assert {r.job.job_id: r.end for r in result.records} == {1: 600.0, 2: 900.0, 3: 320.0, 4: 1520.0}
    # 3,900 busy node-seconds at 191 W, the other 4 x 1,520 - 3,900 at 95 W
    assert result.energy_by_state["computing"] == pytest.approx(3900 * 191)
    assert result.energy_by_state["idle"] == pytest.approx((4 * 1520 - 3900) * 95)
    summary = result.summary()
    assert summary["makespan_s"] == 1520 and summary["max_wait_s"] == 590
    assert summary["mean_wait_s"] == pytest.approx((0 + 590 + 0 + 290) / 4)


def test_backfill_runs_every_bf_interval_as_in_the_controller(tmp_path) -> None:
    # bf_interval=30 (the default): the passes at t=10 and t=20 are strict, the full pass at t=0 was
    # the last one, so J3 is backfilled at the next full pass, t=30, with J4 (no node left for it)
    result = engine.Simulation(_platform(tmp_path), Workload(list(HAND))).run()
    assert {r.job.job_id: r.start for r in result.records} == {1: 0.0, 2: 600.0, 3: 30.0, 4: 330.0}


def test_jobs_share_nodes_cpu_by_cpu_and_pay_their_share_of_the_watts(tmp_path) -> None:
    path = tmp_path / "shared.conf"
    path.write_text("SchedulerType=sched/backfill\nSchedulerParameters=bf_interval=1\nSelectType=select/cons_tres\n"
                    "NodeName=c[1-2] CPUs=4 RealMemory=1000 IdleWatts=100 MaxWatts=300\n"
                    "PartitionName=p Nodes=c[1-2] Default=YES\n")
    jobs = Workload([SimJob(1, 0, 100, 100, 2), SimJob(2, 0, 100, 100, 2), SimJob(3, 0, 200, 200, 6)])
    result = engine.Simulation(config.load(path), jobs, shared=True).run()
    records = {r.job.job_id: r for r in result.records}
    # J1 and J2 pack onto c1; J3 (6 CPUs) needs both nodes whole, so it waits for them
    assert records[1].alloc == records[2].alloc == ["c1"] and records[3].start == 100.0
    # a job on half a node pays half its idle watts and all of its own dynamic watts
    assert records[1].energy_j == pytest.approx((100 + 200) * 0.5 * 100)
    assert records[3].energy_j == pytest.approx(300 * 6 / 4 * 200)
    assert result.energy_by_state["computing"] == pytest.approx(300 * 100 + 6 / 4 * 300 * 200 + 100 * 0.5 * 200)


@pytest.mark.parametrize(("parameters", "together"), [("", 2), ("SelectTypeParameters=CR_Core_Memory\n", 2),
                                                     ("SelectTypeParameters=CR_CPU\n", 4)])
def test_memory_is_held_against_a_node_only_where_select_type_parameters_say(tmp_path, parameters: str,
                                                                            together: int) -> None:
    """Slurm's default (CR_Core_Memory) holds each job's memory (DefMemPerCPU=500 here) against its
    node's 1000 MB: two one-CPU jobs at a time; with CR_CPU only the CPUs count: all four."""
    path = tmp_path / "mem.conf"
    path.write_text(f"SchedulerParameters=bf_interval=1\nDefMemPerCPU=500\n{parameters}"
                    "NodeName=c1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=c1 Default=YES\n")
    jobs = Workload([SimJob(i, 0, 100, 100, 1, nodes=1) for i in range(1, 5)])
    result = engine.Simulation(config.load(path), jobs, shared=True).run()
    assert sum(r.start == 0.0 for r in result.records) == together


def test_idle_timeout_in_virtual_time_switches_and_wakes_nodes(tmp_path) -> None:
    # SuspendTime=0: idle nodes go off at once (20 s at 100 W, then 10 W), and a job given off nodes
    # waits 10 s for them to switch on (120 W)
    jobs = Workload([SimJob(1, 0, 100, 100, 1), SimJob(2, 1000, 100, 100, 2)])
    result = engine.Simulation(_platform(tmp_path, "SuspendTime=0", nodes=2), jobs).run()
    starts = {r.job.job_id: r.start for r in result.records}
    # at t=0 both nodes are on: job 1 starts on s1, s2 goes off; at 1000 both are off: job 2 waits 10 s
    assert starts == {1: 0.0, 2: 1010.0}
    assert result.switches_off == 2 and result.switches_on == 2
    energy = result.energy_by_state
    assert energy["computing"] == pytest.approx(100 * 191 + 2 * 100 * 191)
    assert energy["switching_on"] == pytest.approx(2 * 10 * 120)
    assert energy["switching_off"] == pytest.approx(2 * 20 * 100)
    # s2 off from 20 to 1000, s1 from 120 to 1000
    assert energy["off"] == pytest.approx((1000 - 20) * 10 + (1000 - 120) * 10)
    always_on = engine.Simulation(_platform(tmp_path, nodes=2), jobs).run()
    assert sum(energy.values()) < sum(always_on.energy_by_state.values())


def test_jobs_go_to_nodes_that_are_on_before_switched_off_ones(tmp_path) -> None:
    # Eight one-CPU nodes, SuspendTime=60. J1 (t=0, 4 nodes, 100 s) runs on s1-s4; s5-s8 go off at
    # 60. J2 (t=90, 3 nodes) must wake three of them: s5-s7. J1 ends at 100. J3 (t=110, 1 node) has
    # s1-s4 on and idle, and s8 off, alone between busy nodes (the tightest fit): it runs on s1 at
    # once, and nothing else is switched on.
    jobs = Workload([SimJob(1, 0, 100, 100, 4), SimJob(2, 90, 1000, 1000, 3), SimJob(3, 110, 100, 100, 1)])
    result = engine.Simulation(_platform(tmp_path, "SuspendTime=60", nodes=8), jobs).run()
    placed = {r.job.job_id: (r.start, sorted(r.alloc_cpus)) for r in result.records}
    assert placed[3] == (110.0, ["s1"])
    assert placed[2] == (90.0 + 10, ["s5", "s6", "s7"])  # after SwitchOnTime
    assert result.switches_on == 3


def test_same_input_same_output(tmp_path) -> None:
    conf = _platform(tmp_path, "PowerSaveType=power_save/energy_aware", nodes=8)
    jobs = workload.synthetic_002(60, 8, 1, seed=5)
    assert jobs.jobs == workload.synthetic_002(60, 8, 1, seed=5).jobs
    first, second = (engine.Simulation(conf, jobs).run() for _ in range(2))
    rows = [(r.job.job_id, r.start, r.end, r.energy_j) for r in first.records]
    assert rows == [(r.job.job_id, r.start, r.end, r.energy_j) for r in second.records]
    assert first.energy_by_state == second.energy_by_state


@pytest.mark.skipif(not KTH.exists(), reason=f"the KTH SP2 trace is not at {KTH}")
def test_swf_parsing_of_a_real_trace() -> None:
    trace = workload.parse_swf(KTH, max_jobs=500)
    assert trace.header["MaxNodes"] == "100" and trace.header["UnixStartTime"] == "843480031"
    assert len(trace.jobs) == 500
    with gzip.open(KTH, "rt") as handle:
        first = next(line for line in handle if not line.startswith(";")).split()
    assert len(first) == 18
    job = trace.jobs[0]
    assert (job.job_id, job.submit, job.runtime, job.procs, job.walltime, job.user) == \
        (int(first[0]), float(first[1]), float(first[3]), int(first[4]), float(first[8]), f"u{first[11]}")


def test_swf_conventions_unknowns_clipping_and_errors(tmp_path) -> None:
    path = tmp_path / "t.swf"
    path.write_text("; MaxNodes: 8\n"
                    "1 0 5 100 4 -1 -1 4 60 -1 1 3 3 -1 -1 -1 -1 -1\n"  # ran 100 s over a 60 s limit
                    "2 10 0 50 -1 -1 -1 2 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n"  # allocated unknown: requested 2
                    "3 20 0 -1 2 -1 -1 2 600 -1 0 4 4 -1 -1 -1 -1 -1\n")  # run time unknown: skipped
    trace = workload.parse_swf(path)
    assert [(j.job_id, j.runtime, j.walltime, j.procs, j.user) for j in trace.jobs] == \
        [(1, 60, 60, 4, "u3"), (2, 50, 50, 2, "unknown")]
    assert trace.clipped == 1 and trace.skipped == 1 and trace.header == {"MaxNodes": "8"}
    path.write_text("1 0 5 100 4\n")
    with pytest.raises(workload.WorkloadError, match=r"t.swf:1: 5 fields, SWF has 18"):
        workload.parse_swf(path)
    as_json = tmp_path / "w.json"
    workload.save_json(Workload(list(HAND)), as_json)
    assert workload.load(as_json).jobs == HAND


def test_the_plotter_child_draws_what_it_is_sent_says_why_it_could_not_and_is_always_reaped(tmp_path) -> None:
    with Plotter() as plotter:
        plotter.send(tmp_path, [0.5, 1.0, 2.0], {"idle": 3.6e9, "computing": 7.2e9})
        paths = plotter.drawn()
    assert paths == {"waiting times": tmp_path / "waits.png", "energy by node state": tmp_path / "energy.png"}
    assert all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in paths.values())
    with Plotter() as plotter:  # a folder that is not there: the child's reason comes back
        plotter.send(tmp_path / "none" / "deeper", [1.0], {"idle": 1.0})
        with pytest.raises(PlotError, match="FileNotFoundError"):
            plotter.drawn()
    with pytest.raises(RuntimeError), Plotter() as plotter:  # a replay that fails: nothing is sent
        pid = plotter.pid
        assert pid is not None
        raise RuntimeError
    with pytest.raises(ChildProcessError):  # ended on the closed pipe, and reaped
        os.waitpid(pid, 0)


def test_where_no_process_can_be_forked_the_plots_are_drawn_in_the_process(tmp_path, monkeypatch) -> None:
    def refused() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    result = engine.Simulation(_platform(tmp_path), Workload(list(HAND))).run()
    with beside() as plotter:
        assert plotter is None
        paths = report.write(result, tmp_path / "out", "no fork", plotter)
    assert paths["waiting times"].read_bytes()[:4] == b"\x89PNG"


@pytest.mark.e2e
def test_simulate_command_writes_its_outputs_and_refuses_bad_input(tmp_path) -> None:
    conf = tmp_path / "p.conf"
    _platform(tmp_path)  # writes p.conf
    as_json = tmp_path / "w.json"
    workload.save_json(Workload(list(HAND)), as_json)
    out = tmp_path / "out"
    done = subprocess.run([str(BIN / "wattsched"), "simulate", str(conf), str(as_json), "-o", str(out), "-q",
                           "--set", "SuspendTime=NONE"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "4 jobs" in done.stdout
    rows = (out / "jobs.csv").read_text().splitlines()
    assert rows[0] == ",".join(engine_columns()) and len(rows) == 5
    assert json.loads((out / "summary.json").read_text())["jobs"] == 4
    assert (out / "energy.png").stat().st_size > 0 and "![energy by node state]" in (out / "report.md").read_text()
    for args, message in [([str(conf), str(tmp_path / "none.swf")], "not found"),
                          ([str(conf), str(as_json), "--set", "SuspendTime=soon"], "SuspendTime"),
                          ([str(conf), "synthetic002:x"], "bad generator"),
                          ([str(conf), "lightesp:0"], "bad generator"),
                          ([str(conf), str(as_json), "--user-factor", "alice"], "bad --user-factor"),
                          ([str(conf), str(as_json), "--user-factor", "alice=-1"], "must be positive"),
                          ([str(conf), str(as_json), "--energy-model", "watts"], "unknown energy model")]:
        bad = subprocess.run([str(BIN / "wattsched"), "simulate", *args, "-q", "-o", str(out)], capture_output=True,
                             text=True, timeout=60)
        assert bad.returncode == 1 and message in bad.stderr, bad.stderr


def engine_columns() -> tuple[str, ...]:
    from wattsched.simulator.report import JOB_COLUMNS

    return JOB_COLUMNS


def test_light_esp_is_table_ii_scaled_to_the_machine() -> None:
    one = workload.light_esp(180, 12, 1, seed=3)
    assert len(one.jobs) == 230 and sum(j.runtime for j in one.jobs) == sum(
        count * run for _k, _f, count, run in workload.LIGHT_ESP)
    # type A (1/32 of 180 cores) rounds to one 12-core node; Z takes the whole machine, twice
    assert sum(j.procs == 180 for j in one.jobs) == 2 and min(j.procs for j in one.jobs) == 12
    assert max(j.submit for j in one.jobs) <= workload.LIGHT_ESP_SPAN_S
    four = workload.light_esp(180, 12, 4, seed=3)
    assert len(four.jobs) == 920 and max(j.submit for j in four.jobs) > 3 * workload.LIGHT_ESP_SPAN_S
    work = {u: sum(j.procs * j.runtime for j in four.jobs if j.user == u) for u in ("user1", "user2", "user3")}
    assert max(work.values()) / min(work.values()) < 1.1  # three users of (nearly) equal workload
    green = workload.with_user_factors(four, {"user1": 0.7})
    assert {j.energy_factor for j in green.jobs if j.user == "user1"} == {0.7}
    assert {j.energy_factor for j in green.jobs if j.user != "user1"} == {1.0}
    assert workload.most_active_users(four, 1)[0] in work


@pytest.mark.e2e
def test_energy_fairshare_favours_the_green_user_as_in_seed_000(tmp_path) -> None:
    """Experiment (b) in small: Light-ESP x4, users 0.7x / 1x / 1.3x. Under FS their mean stretches
    are about equal; under EFS the green user's is the lowest and the gluttonous user's the highest."""
    base = config.load(Path(__file__).resolve().parents[2] / "etc" / "lightesp180.conf")
    jobs = workload.with_user_factors(workload.light_esp(180, 12, 4, seed=1), {"user1": 0.7, "user3": 1.3})
    means = {}
    for policy, weights in (("FS", {"priority_weight_fairshare": 1000}), ("EFS", {"priority_weight_energy": 1000})):
        result = engine.Simulation(config.with_overrides(base, priority_weight_age=0, **weights), jobs,
                                   energy_model="cpu").run()
        by: dict[str, list[float]] = {}
        for r in result.records:
            by.setdefault(r.job.user, []).append((r.wait + r.runtime) / r.runtime)
        means[policy] = {u: sum(v) / len(v) for u, v in by.items()}
    fs, efs = means["FS"], means["EFS"]
    assert max(fs.values()) / min(fs.values()) < 1.25
    assert efs["user1"] < efs["user2"] < efs["user3"] and efs["user3"] / efs["user1"] > 1.5


def test_a_running_jobs_energy_counts_for_energy_fairshare_as_its_cpu_time_for_fairshare(tmp_path) -> None:
    """While a long job runs, its user's EnergyFairShare falls with its joules as FairShare falls
    with its CPU-seconds (energy proportional to CPU-seconds: the two factors agree); it is not held
    back until the job ends (which, in the efs-trace experiment, turned green users' gains into losses)."""
    conf = config.with_overrides(_platform(tmp_path, "PriorityType=priority/multifactor\nPriorityCalcPeriod=1",
                                           nodes=2), priority_weight_age=0, priority_weight_fairshare=1000,
                                 priority_weight_energy=1000)
    jobs = Workload([SimJob(1, 0, 10000, 10000, 1, "long"), SimJob(2, 6000, 100, 100, 2, "other")])
    sim = engine.Simulation(conf, jobs, energy_model="cpu")
    seen: list[tuple[float, float]] = []
    priorities = sim.priority.priorities

    def spy(snapshot):
        if snapshot.now < 10000 and ("default", "long") in snapshot.fairshare:
            seen.append(snapshot.fairshare[("default", "long")])
        return priorities(snapshot)

    sim.priority.priorities = spy
    sim.run()
    assert seen, "no pass while job 1 ran and job 2 waited"
    fs, efs = seen[-1]
    assert fs < 0.9 and efs == pytest.approx(fs, rel=1e-6)


def test_cpu_energy_model_and_closed_loop_clients(tmp_path) -> None:
    conf = _platform(tmp_path, "SchedulerParameters=bf_interval=1", nodes=2)
    # job 2 is job 1's client's next request: sent 50 s after job 1 ends, whatever its trace time
    jobs = Workload([SimJob(1, 0, 100, 100, 1, "a", energy_factor=0.7),
                     SimJob(2, 5, 100, 100, 1, "a", preceding=1, think=50)])
    result = engine.Simulation(conf, jobs, energy_model="cpu").run()
    records = {r.job.job_id: r for r in result.records}
    assert records[2].submit == 150.0 and records[2].start == 150.0 and records[2].wait == 0.0
    # CPU-seconds at MaxWatts per CPU, times the user's factor
    assert records[1].energy_j == pytest.approx(100 * 191 * 0.7)
    assert records[2].energy_j == pytest.approx(100 * 191)


def test_backfill_wake_up_is_due_despite_float_rounding(tmp_path) -> None:
    # submit times that are not whole seconds: last + 1 - last may come out below 1 (a wake-up that
    # was never due spun forever at one instant)
    conf = _platform(tmp_path, "SchedulerParameters=bf_interval=1", nodes=2)
    first = 31.931167482028844  # (first + 1) - first < 1
    assert (first + 1) - first < 1
    jobs = Workload([SimJob(i, first + 0.1 * (i - 1), 30, 60, 2 if i % 3 == 0 else 1) for i in range(1, 40)])
    sim = engine.Simulation(conf, jobs)

    def bounded(_done: int, _total: int) -> None:
        assert sim.events < 10_000, "the simulation spins at one instant"

    sim.progress = bounded
    result = sim.run()
    assert all(r.end > 0 for r in result.records) and result.passes < 1000


def test_seed_002_jobs_take_some_cores_on_each_of_their_servers(tmp_path) -> None:
    # Table 5: 1-5 servers, 1, 2 or 4 cores on each, core load 30-99 %; servers shared core by core
    load = workload.synthetic_002(60, 5, 4, seed=3)
    assert {j.procs // j.nodes for j in load.jobs} == {1, 2, 4} and {j.nodes for j in load.jobs} <= set(range(1, 6))
    assert all(0.30 <= j.energy_factor <= 0.99 and j.procs % j.nodes == 0 for j in load.jobs)
    conf = config.load(Path(__file__).resolve().parents[2] / "etc" / "seed002.conf")
    result = engine.Simulation(conf, load).run()
    for record in result.records:
        cores = record.job.procs // record.job.nodes
        assert len(record.alloc_cpus) == record.job.nodes and set(record.alloc_cpus.values()) == {cores}
    # servers are shared: some server ran jobs of two clients at once
    spans = [(r.start, r.end, node) for r in result.records for node in r.alloc_cpus]
    assert any(a[2] == b[2] and a[0] < b[1] and b[0] < a[1] and a is not b for a in spans for b in spans)


def _accounts_db(tmp_path, cluster: str = "cluster") -> str:
    """An accounting database as sacctmgr would leave it: a QOS of one job per user, an account
    with an energy budget of 100 kJ, alice and bob in it."""
    from wattsched.accounting.store import AccountingStore

    url = f"sqlite:///{tmp_path / 'acct.db'}"
    store = AccountingStore(url)
    store.setup(cluster, 0.0)
    assocs = store.assocs(cluster)
    assocs.add_qos("one", {"maxjobsperuser": "1"})
    assocs.add_account("proj", settings={"qos": "one", "defaultqos": "one"})
    assocs.add_account("lean", settings={"grptresmins": "energy=100000"})
    assocs.add_user("alice", "proj")
    assocs.add_user("bob", "proj")
    assocs.add_user("carol", "lean")
    store.close()
    return url


def test_the_simulation_holds_jobs_to_the_same_limits_as_the_controller(tmp_path) -> None:
    from wattsched.simulator.accounts import SimAccounts

    conf = _platform(tmp_path, "AccountingStorageEnforce=associations,limits\nPriorityCalcPeriod=1\n"
                               "PriorityDecayHalfLife=0\nClusterName=cluster")
    url = _accounts_db(tmp_path)
    jobs = Workload([SimJob(1, 0, 100, 100, 1, "alice", "proj"), SimJob(2, 0, 100, 100, 1, "alice", "proj"),
                     SimJob(3, 0, 100, 100, 1, "bob", "proj"),
                     # carol's first job uses 1 node x 191 W x 600 s = 115 kJ: her 100 kJ are gone at 524 s
                     SimJob(4, 0, 600, 600, 1, "carol", "lean"), SimJob(5, 550, 100, 100, 1, "carol", "lean")])
    free = engine.Simulation(conf, jobs).run()
    held = engine.Simulation(conf, jobs, accounts=SimAccounts.load(conf, url, 0.0)).run()
    starts = {r.job.job_id: r.start for r in held.records}
    assert {r.job.job_id: r.start for r in free.records} == {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0, 5: 550.0}
    # MaxJobsPerUser=1: alice's second job waits for her first, bob's does not
    assert starts[1] == 0.0 and starts[2] == 100.0 and starts[3] == 0.0
    # the energy budget is used up when carol's second job comes: it never runs
    assert starts[5] == -1.0 and held.records[-1].job.job_id == 5


def test_the_simulation_preempts_as_the_controller(tmp_path) -> None:
    from wattsched.accounting.store import AccountingStore
    from wattsched.simulator.accounts import SimAccounts

    url = f"sqlite:///{tmp_path / 'preempt.db'}"
    store = AccountingStore(url)
    store.setup("cluster", 0.0)
    assocs = store.assocs("cluster")
    assocs.add_qos("low", {})
    assocs.add_qos("high", {"priority": "100", "preempt": "low"})
    assocs.add_account("proj", settings={"qos": "low", "defaultqos": "low"})
    assocs.add_account("vip", settings={"qos": "high", "defaultqos": "high"})
    assocs.add_user("alice", "proj")
    assocs.add_user("victor", "vip")
    store.close()
    for mode in ("REQUEUE", "CANCEL", "SUSPEND"):
        # a suspended job keeps its memory: only jobs sharing nodes (a CPU each) may take its CPUs
        conf = _platform(tmp_path, f"PreemptType=preempt/qos\nPreemptMode={mode}\nClusterName=cluster\n"
                                   "AccountingStorageEnforce=associations,limits\nSchedulerParameters=bf_interval=1"
                                   + ("\nSelectType=select/cons_tres" if mode == "SUSPEND" else ""))
        jobs = Workload([*(SimJob(i, 0, 1000, 1000, 1, "alice", "proj") for i in range(1, 5)),
                         SimJob(9, 100, 100, 100, 1, "victor", "vip")])
        result = engine.Simulation(conf, jobs, accounts=SimAccounts.load(conf, url, 0.0),
                                   shared=mode == "SUSPEND").run()
        by_id = {r.job.job_id: r for r in result.records}
        assert by_id[9].start == 100.0 and by_id[9].end == 200.0  # it took a node at once
        victim = by_id[4]  # the youngest low job (ties: the highest id)
        summary = result.summary()
        if mode == "REQUEUE":
            assert victim.requeues == 1 and victim.start == 200.0 and victim.end == 1200.0
            assert summary["requeued"] == 1 and summary["preempted"] == 0
        elif mode == "CANCEL":
            assert victim.preempted == "PREEMPTED" and victim.end == 100.0
            assert summary["preempted"] == 1 and summary["requeued"] == 0
        else:  # frozen from 100 to 200, while its CPUs ran the preemptor: it ends 100 s late, drawing
            # nothing meanwhile
            assert victim.start == 0.0 and victim.end == 1100.0 and victim.runtime == 1000.0
            assert victim.energy_j == pytest.approx(by_id[1].energy_j)
            assert summary["suspended"] == 1 and summary["requeued"] == summary["preempted"] == 0
        assert all(by_id[i].end == 1000.0 for i in (1, 2, 3))


def _busy_nodes(records, t: float) -> int:
    return sum(r.nodes for r in records if r.start >= 0 and r.start <= t < r.end)


@pytest.mark.skipif(not KTH.exists(), reason=f"the KTH SP2 trace is not at {KTH}")
def test_a_daily_cap_dip_on_a_real_trace_is_planned_around(tmp_path) -> None:
    """A demand-response dip every day, 18:00-20:00 at 60 % of MaxWatts, replayed on the KTH
    trace: the draw is never over the cap in force, while without the schedule the same trace
    goes over what the dip allows."""
    schedule = tmp_path / "dip"
    schedule.write_text("PowerCap=60%@18:00 Duration=2:00:00 Flags=DAILY\n")
    trace = workload.parse_swf(KTH, max_jobs=800)
    free = engine.Simulation(_platform(tmp_path, nodes=100), trace).run()
    dipped = engine.Simulation(_platform(tmp_path, f"PowerCapSchedule={schedule}", nodes=100), trace).run()
    allowed = 0.6 * 100 * 191

    def dips(result):
        return [(t, t + 7200) for t, cap in result.cap_changes if cap == allowed]

    windows = dips(dipped)
    assert len(windows) >= 3 and all(cap in (allowed, float("inf")) for _t, cap in dipped.cap_changes)

    def worst(result) -> float:
        """The most the nodes could draw in a dip (busy at MaxWatts), from the jobs' own records."""
        moments = [t for a, b in windows for t in (a, *(r.start for r in result.records if a <= r.start < b))]
        return max(busy * 191 + (100 - busy) * 95 for busy in (_busy_nodes(result.records, t) for t in moments))

    assert worst(free) > allowed  # the dip binds: this trace would break it
    assert worst(dipped) <= allowed
    assert dipped.over_cap_s == 0 and dipped.over_cap_w == 0 and dipped.peak_w > allowed
    # the jobs that never started are those no day lets run: too large for the dip, too long for the 22 h between
    held = [r for r in dipped.records if r.start < 0]
    assert all(r.nodes * 191 + (100 - r.nodes) * 95 > allowed and r.job.walltime > 22 * 3600 for r in held)
    assert len(held) < len(dipped.records) / 100


@pytest.mark.skipif(not KTH.exists(), reason=f"the KTH SP2 trace is not at {KTH}")
@pytest.mark.parametrize(("platform", "shared"), [("kth100.conf", False), ("ricc1024.conf", True)])
def test_passes_that_can_start_nothing_are_skipped_and_the_schedule_is_the_same(platform, shared) -> None:
    """A pass whose every pending job needs more CPUs than the machine has free is not run (the
    simulation keeps nothing else of it here): the schedule is the one of running every pass, and
    the passes are counted and timed as before."""
    conf = config.load(Path(__file__).resolve().parents[2] / "etc" / platform)
    trace = workload.parse_swf(KTH, max_jobs=1500)
    full = engine.Simulation(conf, trace, shared=shared)
    full.idle_passes = False
    reference = full.run()
    shortcut = engine.Simulation(conf, trace, shared=shared)
    assert shortcut.idle_passes
    skipped = 0
    check = shortcut._nothing_can_start

    def counted() -> bool:
        nonlocal skipped
        idle = check()
        skipped += idle
        return idle

    shortcut._nothing_can_start = counted  # type: ignore[method-assign]
    result = shortcut.run()
    assert skipped > 0
    assert [(r.job.job_id, r.start, r.end, sorted(r.alloc)) for r in result.records] == \
        [(r.job.job_id, r.start, r.end, sorted(r.alloc)) for r in reference.records]
    assert (result.passes, result.pass_times, result.energy_by_state) == (reference.passes, reference.pass_times,
                                                                          reference.energy_by_state)


def test_a_cap_step_beyond_the_planners_horizon_comes_when_its_time_comes(tmp_path) -> None:
    """The planner sees the schedule 8 days ahead; a step further away still becomes the cap."""
    (tmp_path / "caps").write_text("PowerCap=200@now+9days\n")
    day = 86400
    jobs = Workload([SimJob(1, 0, 10 * day, 20 * day, 1)])  # started: the step is not yet in sight
    result = engine.Simulation(_platform(tmp_path, f"PowerCap=1000\nPowerCapSchedule={tmp_path / 'caps'}"),
                               jobs).run()
    assert result.cap_changes == [(0, 1000), (9 * day, 200)]
    # one node busy (191 W) and three idle (95 W): 476 W over 200 W for the last day
    assert result.over_cap_s == pytest.approx(day) and result.over_cap_w == pytest.approx(476 - 200)
