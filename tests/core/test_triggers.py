"""The triggers' pass (wattsched.triggers), as Slurm's trigger manager: pending ones are pulled by
their events, fire ``offset`` seconds later with what the event concerned as the program's last
argument, once (a permanent one waits again); idle and a job's time are levels, not events."""

from __future__ import annotations

from wattsched.triggers import Events, JobView, Trigger, argv, due, matching, node_events, pull

NOW = 1_000_000.0


def trig(trig_id: int, res_type: str, *types: str, **fields) -> Trigger:
    return Trigger(trig_id=trig_id, res_type=res_type, types=types, offset=fields.pop("offset", 0), uid=1000,
                   gid=100, user="alice", program=fields.pop("program", "/bin/notify"), **fields)


def test_a_node_event_pulls_the_triggers_on_those_nodes_and_names_them() -> None:
    every = trig(1, "node", "down", res_id="*")
    some = trig(2, "node", "down", nodes=("n1", "n2"), res_id="n[1-2]")
    other = trig(3, "node", "down", nodes=("n9",), res_id="n9")
    drained = trig(4, "node", "drained", offset=30)
    events = Events({"down": frozenset({"n2", "n3"}), "drained": frozenset({"n5"})})
    kept, dropped = pull([every, some, other, drained], events, {}, {}, NOW)
    assert not dropped
    assert [(t.trig_id, t.pulled, t.arg, t.due) for t in kept] == [
        (1, True, "n[2-3]", NOW), (2, True, "n2", NOW), (3, False, "", 0.0), (4, True, "n5", NOW + 30)]
    assert every.pulled is False  # its input is not changed


def test_a_pulled_trigger_fires_at_its_time_once_unless_permanent() -> None:
    once = trig(1, "node", "up", offset=10)
    perm = trig(2, "node", "up", perm=True, res_id="*")
    kept, _ = pull([once, perm], Events({"up": frozenset({"n1"})}), {}, {}, NOW)
    kept, fired = due(kept, NOW + 5)
    assert [t.trig_id for t in fired] == [2]
    assert [(t.trig_id, t.pulled) for t in kept] == [(1, True), (2, False)]  # the permanent one waits again
    kept, fired = due(kept, NOW + 10)
    assert [t.trig_id for t in fired] == [1] and [t.trig_id for t in kept] == [2]
    assert argv(fired[0]) == ["notify", "n1"]


def test_idle_is_a_level_of_so_many_seconds() -> None:
    idle = trig(1, "node", "idle", offset=300)
    kept, _ = pull([idle], Events(), {}, {"n1": NOW - 299, "n2": NOW - 50}, NOW)
    assert not kept[0].pulled
    kept, _ = pull([idle], Events(), {}, {"n1": NOW - 300, "n2": NOW - 400}, NOW)
    assert kept[0].pulled and kept[0].arg == "n[1-2]" and kept[0].due == NOW


def test_job_triggers_meet_its_end_its_time_limit_and_its_nodes() -> None:
    fini = trig(1, "job", "fini", job_id=7, res_id="7")
    time_ = trig(2, "job", "time", job_id=8, offset=-60, res_id="8")
    down = trig(3, "job", "down", job_id=8, res_id="8")
    gone = trig(4, "job", "time", job_id=9, res_id="9")
    running = {8: JobView(ended=False, running=True, nodes=("n1",), limit_end=NOW + 61), 7: JobView(ended=False)}
    kept, dropped = pull([fini, time_, down, gone], Events(), running, {}, NOW)
    assert [t.pulled for t in kept] == [False, False, False] and dropped == [gone]
    running[8] = JobView(ended=False, running=True, nodes=("n1",), limit_end=NOW + 60)
    kept, _ = pull([fini, time_, down], Events({"down": frozenset({"n1"})}), running, {}, NOW)
    assert [(t.pulled, t.arg) for t in kept] == [(False, ""), (True, "8"), (True, "8")]
    kept, _ = pull([fini], Events(), {}, {}, NOW)  # a job that is gone has ended
    assert kept[0].pulled and kept[0].arg == "7"


def test_named_events_and_the_program_line() -> None:
    resumed = trig(1, "database", "primary_database_resumed_operation", program="/bin/page ops --urgent")
    failed = trig(2, "slurmctld", "primary_slurmctld_failure")
    reconfig = trig(3, "node", "reconfig", res_id="*")
    kept, _ = pull([resumed, failed, reconfig], Events(named=frozenset({"primary_database_resumed_operation",
                                                                       "reconfig"})), {}, {}, NOW)
    assert [t.pulled for t in kept] == [True, False, True]
    assert argv(kept[0]) == ["page", "ops", "--urgent", "primary_database_resumed_operation"]
    assert argv(kept[2])[-1] == "reconfig"
    many = trig(4, "node", "down", program="/bin/x " + " ".join(str(i) for i in range(80)))
    assert argv(many) == ["x", *(str(i) for i in range(62))]  # 63 words of the program: no room for the nodes


def test_node_events_from_two_views() -> None:
    before = {"n1": (True, False, False), "n2": (False, False, False), "n3": (False, False, True)}
    after = {"n1": (False, False, False), "n2": (True, False, False), "n3": (False, True, False),
             "n4": (True, False, False)}  # n4 is new: no event
    assert node_events(before, after) == {"up": {"n1"}, "down": {"n2"}, "drained": {"n3"}, "draining": set()}


def test_clear_selects_by_id_job_and_user() -> None:
    book = [trig(1, "job", "fini", job_id=5), trig(2, "node", "down"),
            Trigger(3, "node", ("up",), 0, 1001, 100, "bob", "/bin/x")]
    assert [t.trig_id for t in matching(book, job_id=5)] == [1]
    assert [t.trig_id for t in matching(book, uid=1001)] == [3]
    assert [t.trig_id for t in matching(book, trig_id=2, uid=1000)] == [2]
    assert Trigger.from_dict(book[0].to_dict()) == book[0]
