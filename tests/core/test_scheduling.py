"""The pure scheduling core: snapshots in, decisions out, no clock and no I/O."""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from wattsched import states
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.plugins.select.linear import LinearSelect
from wattsched.scheduling.candidates import Candidates, feasible
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.eligibility import dependency_state
from wattsched.scheduling.records import JobBrief, JobRequest, NodeSnap, PartitionSnap, Snapshot

NOW = 1_000_000.0


def nodes(count: int = 4, cpus: int = 4, mem: int = 8000, **kw) -> tuple[NodeSnap, ...]:
    return tuple(NodeSnap(f"n{i:02d}", cpus, cpus, mem, mem, **kw) for i in range(1, count + 1))


def snap(jobs: list[JobRequest], node_list: tuple[NodeSnap, ...] | None = None, briefs=None,
         **part) -> Snapshot:
    node_list = node_list if node_list is not None else nodes()
    partition = PartitionSnap("debug", tuple(n.name for n in node_list), **part)
    return Snapshot(now=NOW, nodes=node_list, partitions={"debug": partition}, pending=tuple(jobs),
                    jobs=briefs or {})


def job(job_id: int, **kw) -> JobRequest:
    return JobRequest(job_id=job_id, user=kw.pop("user", "u"), partition="debug", submit_time=NOW - 100 + job_id,
                      **kw)


def run(snapshot: Snapshot, select=None):
    return schedule(snapshot, BasicPriority(), BuiltinScheduler(), select or ConsTresSelect())


def test_fifo_order_and_first_fit_packing() -> None:
    decisions = run(snap([job(1, ntasks=3), job(2, ntasks=2), job(3, ntasks=4)]))
    started = {j: dict(a.cpus) for j, a in decisions.starts}
    assert started == {1: {"n01": 3}, 2: {"n01": 1, "n02": 1}, 3: {"n02": 3, "n03": 1}}
    assert decisions.priorities[1] > decisions.priorities[2] > decisions.priorities[3]


def test_blocked_head_blocks_the_partition() -> None:
    decisions = run(snap([job(1, nodes_min=5, ntasks=5), job(2)]))
    assert decisions.starts == []
    assert decisions.reasons == {1: states.R_RESOURCES, 2: states.R_PRIORITY}


def test_node_count_spreads_tasks_evenly() -> None:
    decisions = run(snap([job(1, nodes_min=4, ntasks=8)]))
    (_, alloc), = decisions.starts
    assert dict(alloc.tasks) == {"n01": 2, "n02": 2, "n03": 2, "n04": 2}


def test_exclusive_and_linear_take_whole_idle_nodes() -> None:
    busy = (NodeSnap("n01", 4, 3, 8000, 8000), *nodes(3)[1:])
    decisions = run(snap([job(1, exclusive=True)], busy))
    assert dict(decisions.starts[0][1].cpus) == {"n02": 4}
    linear = run(snap([job(1)], busy), LinearSelect())
    assert dict(linear.starts[0][1].cpus) == {"n02": 4}


def test_memory_is_consumable() -> None:
    decisions = run(snap([job(1, mem_per_node_mb=6000), job(2, mem_per_node_mb=6000)], nodes(1)))
    assert [j for j, _ in decisions.starts] == [1]
    assert decisions.reasons[2] == states.R_RESOURCES
    per_cpu = run(snap([job(1, ntasks=4, mem_per_cpu_mb=3000)], nodes(2)))
    assert dict(per_cpu.starts[0][1].tasks) == {"n01": 2, "n02": 2}


def test_required_excluded_nodes_features_and_weight() -> None:
    weighted = (NodeSnap("n01", 4, 4, 8000, 8000, weight=10), NodeSnap("n02", 4, 4, 8000, 8000, weight=1),
                NodeSnap("n03", 4, 4, 8000, 8000, features=frozenset({"gpu"})))
    decisions = run(snap([job(1), job(2, req_nodes=("n01",)), job(3, exc_nodes=("n02",)),
                          job(4, features=("gpu",))], weighted))
    started = {j: list(a.cpus) for j, a in decisions.starts}
    assert started == {1: ["n02"], 2: ["n01"], 3: ["n03"], 4: ["n03"]}


def test_holds_begin_time_and_partition_limits() -> None:
    decisions = run(snap([job(1, hold="user"), job(2, hold="admin"), job(3, begin_time=NOW + 60),
                          job(4, time_limit_min=120), job(5, nodes_min=3, ntasks=3, time_limit_min=10), job(6)],
                         max_time_min=60, max_nodes=2))
    assert decisions.reasons == {1: states.R_HELD_USER, 2: states.R_HELD_ADMIN, 3: states.R_BEGIN,
                                 4: states.R_PART_TIME, 5: states.R_PART_NODES, 6: states.R_PART_TIME}
    assert decisions.priorities[1] == 0
    down = run(snap([job(1, time_limit_min=10)], state="DOWN"))
    assert down.reasons == {1: states.R_PART_DOWN}


def test_dependencies() -> None:
    briefs = {1: JobBrief(1, states.RUNNING), 2: JobBrief(2, states.COMPLETED),
              3: JobBrief(3, states.FAILED, exit_code=1), 4: JobBrief(4, states.PENDING)}
    verdict = {dep: dependency_state(job(9, dependency=dep), briefs) for dep in
               ["afterok:2", "afterok:1", "afterok:3", "afternotok:3", "afterany:3", "after:1", "after:4",
                "afterok:2:1", "afterok:3?afterok:2", "afterok:3,afterok:2", "singleton"]}
    assert verdict == {"afterok:2": None, "afterok:1": states.R_DEPENDENCY, "afterok:3": states.R_DEP_NEVER,
                       "afternotok:3": None, "afterany:3": None, "after:1": None, "after:4": states.R_DEPENDENCY,
                       "afterok:2:1": states.R_DEPENDENCY, "afterok:3?afterok:2": None,
                       "afterok:3,afterok:2": states.R_DEP_NEVER, "singleton": None}
    same_name = {1: JobBrief(1, states.RUNNING, user="u", name="x")}
    assert dependency_state(job(9, dependency="singleton", name="x"), same_name) == states.R_DEPENDENCY


def test_array_throttle_counts_starts_within_a_pass() -> None:
    tasks = [job(i, array_job_id=10, array_throttle=2) for i in range(10, 16)]
    briefs = {10: JobBrief(10, states.PENDING, array_job_id=10)}
    decisions = run(snap(tasks, briefs=briefs))
    assert [j for j, _ in decisions.starts] == [10, 11]
    assert all(decisions.reasons[i] == states.R_ARRAY_LIMIT for i in range(12, 16))


def test_feasibility_ignores_current_load() -> None:
    part = PartitionSnap("debug", ("n01", "n02"))
    full = {n.name: NodeSnap(n.name, 4, 0, 8000, 0) for n in nodes(2)}
    assert feasible(job(1, ntasks=8), part, full, ConsTresSelect(), 0)
    assert not feasible(job(1, ntasks=9), part, full, ConsTresSelect(), 0)
    assert not feasible(job(1, cpus_per_task=5), part, full, ConsTresSelect(), 0)


job_requests = st.builds(
    lambda i, n, t, c, ex: (i, n, t, c, ex),
    st.integers(), st.integers(1, 3), st.integers(1, 12), st.integers(1, 4), st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(job_requests, min_size=1, max_size=25), st.integers(1, 6), st.integers(1, 8),
       st.lists(st.integers(0, 8), min_size=6, max_size=6))
def test_property_no_overallocation_and_no_overtaking(raw, node_count, cpus, used) -> None:
    node_list = tuple(NodeSnap(f"n{i}", cpus, cpus - min(cpus, used[i]), 1000, 1000)
                      for i in range(node_count))
    jobs = [job(index + 1, nodes_min=min(n, t), ntasks=t, cpus_per_task=c, exclusive=ex)
            for index, (_i, n, t, c, ex) in enumerate(raw)]
    decisions = run(snap(jobs, node_list))
    free = {n.name: n.free_cpus for n in node_list}
    for _job_id, alloc in decisions.starts:
        for name, count in alloc.cpus.items():
            free[name] -= count
            assert free[name] >= 0
    started = [j for j, _ in decisions.starts]
    blocked = [j for j, r in decisions.reasons.items() if r == states.R_RESOURCES]
    if blocked:  # builtin: nothing after the first blocked job (in priority order) starts
        assert all(j < min(blocked) for j in started)
    for job_id, alloc in decisions.starts:
        request = jobs[job_id - 1]
        assert sum(alloc.tasks.values()) == request.ntasks
        assert len(alloc.cpus) >= request.nodes_min


def test_contiguous_best_fit_keeps_large_runs_whole() -> None:
    """Free: n01 | n03-n04 | n06-n08 (n02, n05 busy). Two nodes go to n03-n04 (the smallest
    run that holds them), three to n06-n08; a small job goes to the lone n01, not into a run."""
    layout = {"n01": 4, "n02": 0, "n03": 4, "n04": 4, "n05": 0, "n06": 4, "n07": 4, "n08": 4}
    busy = tuple(NodeSnap(name, 4, cpus, 8000, 8000) for name, cpus in layout.items())
    two = run(snap([job(1, nodes_min=2, ntasks=8)], busy))
    assert list(two.starts[0][1].cpus) == ["n03", "n04"]
    three = run(snap([job(1, nodes_min=3, ntasks=12)], busy))
    assert list(three.starts[0][1].cpus) == ["n06", "n07", "n08"]
    scattered = run(snap([job(1, nodes_min=4, ntasks=16)], busy))  # no run is long enough: first fit
    assert list(scattered.starts[0][1].cpus) == ["n01", "n03", "n04", "n06"]
    small = run(snap([job(1, ntasks=3)], tuple(n for n in busy if n.name != "n01") + busy[:1]))
    assert dict(small.starts[0][1].cpus) == {"n01": 3}


def _runs_by_definition(usable: list[tuple[NodeSnap, int]]) -> list[list[tuple[NodeSnap, int]]]:
    """Maximal stretches of usable nodes, in candidate order, whose names are one prefix with
    numbers counting up by one, all of one Weight."""

    def key(name: str) -> tuple[str, int] | None:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        return (match.group(1), int(match.group(2))) if match else None

    runs: list[list[tuple[NodeSnap, int]]] = []
    for node, cap in usable:
        if runs:
            last = runs[-1][-1][0]
            before, now = key(last.name), key(node.name)
            if before and now and now == (before[0], before[1] + 1) and node.weight == last.weight:
                runs[-1].append((node, cap))
                continue
        runs.append([(node, cap)])
    return runs


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["n", "n0", "r1-n", "login"]), st.integers(0, 9), st.integers(0, 4),
                          st.sampled_from([1, 1, 1, 2])), min_size=1, max_size=30),
       st.integers(1, 24), st.integers(1, 6), st.integers(0, 6), st.booleans())
# n1 (Weight 1) and n2 (Weight 2) are no run: the 4 tasks go to n5, not to n1-n2
@example(raw=[("n", 1, 2, 1), ("n", 2, 2, 2), ("n", 5, 4, 2)], ntasks=4, nodes_min=1, nodes_max=0, by_name=True)
# with -N 1 a run's capacity is its first node's: n1 fits exactly, n7 is not needed
@example(raw=[("n", 1, 4, 1), ("n", 2, 4, 1), ("n", 3, 4, 1), ("n", 7, 4, 1)], ntasks=4, nodes_min=1, nodes_max=1,
         by_name=True)
def test_contiguous_best_fit_is_the_smallest_run_by_definition(raw, ntasks, nodes_min, nodes_max, by_name) -> None:
    """The run chosen is, among the maximal runs of consecutive names of one Weight that hold the
    job (counting at most nodes_max of a run's nodes), the least by (Weight, capacity, position);
    with none, first fit over all usable nodes. Names zero-padded or not, unnumbered, of several
    prefixes; candidates lowest Weight first, as Candidates gives them, within a Weight in name
    order or in any (a partition's) order. A node range (nodes_max above nodes_min) then takes as
    many more usable nodes as it may: up to nodes_max, and no more than its tasks."""
    seen: set[str] = set()
    candidates = []
    for prefix, number, free, weight in raw:
        name = prefix if prefix == "login" and number % 2 else f"{prefix}{number}"
        if name not in seen:
            seen.add(name)
            candidates.append(NodeSnap(name, 4, free, 8000, 8000, weight=weight))
    candidates.sort(key=lambda n: (n.weight, n.name if by_name else ""))
    request = JobRequest(job_id=1, user="u", partition="p", submit_time=NOW, ntasks=ntasks, nodes_min=nodes_min,
                         nodes_max=nodes_max, ntasks_set=True)
    free = {n.name: (n.free_cpus, n.free_mem_mb) for n in candidates}
    usable = [(n, n.free_cpus) for n in candidates if n.free_cpus >= 1]
    limit = nodes_max or len(usable)
    fitting = [(run[0][0].weight, sum(cap for _n, cap in run[:limit]), usable.index(run[0]))
               for run in _runs_by_definition(usable)
               if len(run) >= nodes_min and sum(cap for _n, cap in run[:limit]) >= ntasks]
    grow = nodes_max > nodes_min
    chosen, capacity = [], 0
    for node, cap in usable[min(fitting)[2]:] if fitting else usable:
        chosen.append(node.name)
        capacity += cap
        if len(chosen) >= (min(limit, ntasks) if grow else limit) or \
                (not grow and len(chosen) >= nodes_min and capacity >= ntasks):
            break
    alloc = ConsTresSelect().select(request, candidates, free, 0)
    if len(chosen) < nodes_min or capacity < ntasks:
        assert alloc is None
    else:
        assert alloc is not None and list(alloc.cpus) == chosen
        assert sum(alloc.tasks.values()) == max(ntasks, len(chosen))  # every node chosen gets a task


@settings(max_examples=150, deadline=None)
@given(layout=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 4), st.sampled_from([1, 1, 5]),
                                 st.sampled_from([0, 0, 2])), min_size=1, max_size=30),
       steps=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 3), st.booleans(), st.integers(0, 29),
                                st.integers(0, 4)), min_size=1, max_size=25),
       by_name=st.booleans())
def test_the_run_index_chooses_what_a_scan_chooses(layout, steps, by_name) -> None:
    """FreeRuns (select/cons_tres's quick_select, kept across passes by the memo) against
    select()'s scan of every candidate, on random node names (gaps break runs) in name or any order, free CPUs,
    Weights and power states, through a sequence of jobs placed and nodes changed between passes."""
    names: dict[str, NodeSnap] = {}
    for number, free, weight, wake in layout:
        names[f"n{number}"] = NodeSnap(f"n{number}", 4, free, 8000, 8000 if free == 4 else 4000, weight=weight,
                                       wake=wake)
    # in name order (where the index serves) or in a partition's own order (where it declines)
    node_list = tuple(sorted(names.values(), key=lambda n: int(n.name[1:])) if by_name else names.values())
    select, memo = ConsTresSelect(), BuiltinScheduler().nodes
    for step, (ntasks, nodes_min, exclusive, changed, new_free) in enumerate(steps):
        snapshot = snap([], node_list)
        candidates = Candidates(snapshot, memo)
        free = dict(memo.free)
        # three jobs in one pass, each after the one before has started: the first of a shape the
        # index does not serve (placed by the scan, perhaps before any index exists), then two it does
        for size, cpt in ((1, 2), (ntasks, 1), (1 + ntasks // 3, 1)):
            request = JobRequest(job_id=step, user="u", partition="debug", submit_time=NOW, ntasks=size,
                                 nodes_min=min(nodes_min, size), exclusive=exclusive, cpus_per_task=cpt)
            quick = select.quick_select(request, candidates, 0)
            scanned = select.select(request, candidates.for_job(request, None), free, 0)
            if cpt > 1:
                assert quick is None
            elif quick is not None:
                assert quick == scanned
            placed = quick or (scanned if cpt > 1 else None)
            for name, cpus in (placed.cpus.items() if placed else ()):  # planned in this pass: the index follows
                free[name] = (free[name][0] - cpus, free[name][1] - placed.mem_mb.get(name, 0))
                memo.taken(name, free[name])
        # between passes one node's free CPUs change (a job ended or started elsewhere)
        target = node_list[changed % len(node_list)]
        node_list = tuple(replace(n, free_cpus=new_free, free_mem_mb=8000 if new_free == 4 else 4000)
                          if n is target else n for n in node_list)


def test_the_run_index_places_the_common_shapes_and_leaves_the_others() -> None:
    # n01-n03 free, n04 busy, n05-n06 free: two tasks go to the smallest run that holds them
    node_list = tuple(NodeSnap(f"n{i:02d}", 1, 0 if i == 4 else 1, 1000, 1000) for i in range(1, 7))
    candidates = Candidates(snap([], node_list), BuiltinScheduler().nodes)
    two = job(1, ntasks=2)
    quick = ConsTresSelect().quick_select(two, candidates, 0)
    assert quick is not None and list(quick.cpus) == ["n05", "n06"]
    assert quick == ConsTresSelect().select(two, candidates.for_job(two, None), candidates.memo.free, 0)
    for other in (job(2, mem_per_cpu_mb=100), job(3, req_nodes=("n01",)), job(4, cpus_per_task=2)):
        assert ConsTresSelect().quick_select(other, candidates, 0) is None  # select() decides
    assert ConsTresSelect().quick_select(two, candidates, 100) is None  # DefMemPerCPU: memory counts


def test_mincpus_and_tmp_choose_among_the_nodes() -> None:
    """--tmp: only nodes with that much TmpDisk; --mincpus: nodes with that many CPUs free, each
    giving the job that many at least."""
    nodes = [NodeSnap("n1", 8, 2, 8000, 8000, tmp_disk_mb=0), NodeSnap("n2", 8, 8, 8000, 8000, tmp_disk_mb=500),
             NodeSnap("n3", 8, 8, 8000, 8000, tmp_disk_mb=100)]
    free = {n.name: (n.free_cpus, n.free_mem_mb) for n in nodes}
    select = ConsTresSelect()
    wants_disk = JobRequest(job_id=1, user="u", partition="p", submit_time=NOW, tmp_mb=200)
    assert list(select.select(wants_disk, nodes, free, 0).cpus) == ["n2"]  # type: ignore[union-attr]
    wants_cpus = JobRequest(job_id=2, user="u", partition="p", submit_time=NOW, min_cpus_per_node=4)
    alloc = select.select(wants_cpus, nodes, free, 0)
    assert alloc is not None and list(alloc.cpus) == ["n2"] and alloc.cpus["n2"] == 4 and alloc.tasks["n2"] == 1
    assert select.select(replace(wants_disk, tmp_mb=600), nodes, free, 0) is None
