"""Reservations that recur (Slurm's HOURLY, DAILY, WEEKDAY, WEEKEND, WEEKLY) overlap another where any
of their windows meets any of its own: a DAILY one starting in two days takes that node every day from
then on, so another DAILY one starting tomorrow or in three days may not have it too."""

from __future__ import annotations

import time

import pytest

from wattsched import states
from wattsched.api import ReservationSpec
from wattsched.controller.reservations import ReservationBook, ReservationError, overlap
from wattsched.model import Allocation, Job, Node, Reservation
from wattsched.nodestates import NodeBase
from wattsched.scheduling.records import PartitionSnap

HOUR, DAY, WEEK = 3600, 86400, 7 * 86400
# a Monday at 10:00, local time: WEEKDAY and WEEKEND follow the local calendar
MONDAY = time.mktime((2027, 3, 1, 10, 0, 0, 0, 0, -1))


def resv(name: str, start: float, minutes: int = 10, flags: tuple[str, ...] = ()) -> Reservation:
    return Reservation(resv_id=1, name=name, start_time=start, end_time=start + minutes * 60, nodes=["n1"],
                       users=["u"], flags=list(flags))


@pytest.mark.parametrize(("flag", "step"), [("HOURLY", HOUR), ("DAILY", DAY), ("WEEKLY", WEEK)])
def test_recurring_ones_meet_at_any_later_window(flag: str, step: int) -> None:
    first = resv("resv1", MONDAY + 2 * step, flags=(flag,))
    assert overlap(first, resv("resv2", MONDAY + step, flags=(flag,)))  # its second window is resv1's first
    assert overlap(first, resv("resv3", MONDAY + 3 * step, flags=(flag,)))
    assert overlap(first, resv("once", MONDAY + 40 * step + 60))  # a one-off inside a later window
    assert not overlap(first, resv("before", MONDAY, flags=()))  # a one-off before it began
    assert not overlap(first, resv("between", MONDAY + 2 * step + 30 * 60, flags=(flag,)))  # other minutes


def test_a_window_years_after_a_recurring_ones_start_is_still_met() -> None:
    hourly = resv("hourly", MONDAY, flags=("HOURLY",))  # the first 10 minutes of every hour
    years = 520 * WEEK
    assert overlap(hourly, resv("later", MONDAY + years + 5 * 60))
    assert overlap(resv("daily", MONDAY + years + 5 * 60, flags=("DAILY",)), hourly)
    assert not overlap(hourly, resv("half-past", MONDAY + years + 30 * 60))


def test_weekdays_and_weekends_do_not_meet() -> None:
    weekdays = resv("wd", MONDAY, flags=("WEEKDAY",))
    assert not overlap(weekdays, resv("we", MONDAY + 5 * DAY, flags=("WEEKEND",)))  # Saturday on
    assert overlap(weekdays, resv("daily", MONDAY + 5 * DAY, flags=("DAILY",)))  # the next Monday
    assert not overlap(weekdays, resv("saturday", MONDAY + 12 * DAY))  # a one-off on a later Saturday
    assert overlap(weekdays, resv("thursday", MONDAY + 10 * DAY))


def test_a_book_refuses_the_second_recurring_reservation_of_its_one_free_node() -> None:
    nodes = {f"n{i}": Node(name=f"n{i}", cpus=4, real_memory_mb=1000, base_state=NodeBase.IDLE) for i in (1, 2)}
    nodes["n2"].base_state = NodeBase.DOWN  # the one free node is n1
    partitions = {"p": PartitionSnap("p", ("n1", "n2"))}
    book = ReservationBook()
    now = MONDAY - DAY

    def create(name: str, start: str, flags: str) -> Reservation:
        spec = ReservationSpec(name=name, start_time=start, duration="00:10:00", node_cnt=1, users="u", flags=flags)
        return book.create(spec, "root", now, nodes, partitions, "p", [])

    assert create("resv1", "now+2days", "DAILY").nodes == ["n1"]
    for name, start in (("resv2", "now+1day"), ("resv3", "now+3days")):
        with pytest.raises(ReservationError, match="Requested nodes are busy"):
            create(name, start, "DAILY")
    assert list(book.by_name) == ["resv1"]
    with pytest.raises(ReservationError, match="HOURLY and DAILY together"):
        create("both", "now+5days", "HOURLY,DAILY")


def test_a_weekday_reservation_rolls_over_the_weekend() -> None:
    friday = resv("wd", MONDAY + 4 * DAY, flags=("WEEKDAY",))
    book = ReservationBook([friday])
    moved, ended = book.roll(friday.end_time + 1)
    assert moved == [friday] and not ended
    assert friday.start_time == MONDAY + 7 * DAY  # on to Monday, not Saturday


def _book_of_three() -> tuple[ReservationBook, dict[str, Node], dict[str, PartitionSnap]]:
    nodes = {f"n{i}": Node(name=f"n{i}", cpus=4, real_memory_mb=1000, base_state=NodeBase.IDLE, not_responding=False)
             for i in (1, 2, 3)}
    return ReservationBook(), nodes, {"p": PartitionSnap("p", ("n1", "n2", "n3"))}


@pytest.mark.parametrize("flags", ["", "REPLACE_DOWN"])
def test_a_down_or_drained_node_is_swapped_for_a_free_one(flags: str) -> None:
    """As Slurm's, for any reservation of NodeCnt nodes (REPLACE_DOWN says so, and more)."""
    book, nodes, partitions = _book_of_three()
    spec = ReservationSpec(name="r", start_time="now", duration="60", node_cnt=1, users="u", flags=flags)
    made = book.create(spec, "root", MONDAY, nodes, partitions, "p", [])
    assert made.nodes == ["n1"] and book.maintain(nodes, partitions, [], MONDAY + 1) == ([], [])
    nodes["n1"].base_state = NodeBase.DOWN
    changed, deleted = book.maintain(nodes, partitions, [], MONDAY + 2)
    assert changed == [made] and deleted == [] and made.nodes == ["n2"]
    nodes["n2"].drain = True
    nodes["n3"].base_state = NodeBase.DOWN
    assert book.maintain(nodes, partitions, [], MONDAY + 3) == ([], [])  # no node to take: it keeps n2
    assert made.nodes == ["n2"]


def test_replace_keeps_a_pool_of_idle_nodes_and_leaves_named_and_maint_ones_alone() -> None:
    book, nodes, partitions = _book_of_three()
    pool = book.create(ReservationSpec(name="pool", start_time="now", duration="60", node_cnt=1, users="u",
                                       flags="REPLACE"), "root", MONDAY, nodes, partitions, "p", [])
    job = Job(job_id=1, name="j", uid=1, user="u", state=states.RUNNING, reservation="pool", start_time=MONDAY,
              alloc=Allocation(alloc_cpus={"n1": 1}))
    nodes["n1"].alloc_cpus = 1  # (held on the node's books, as the controller holds a running job's)
    assert book.maintain(nodes, partitions, [job], MONDAY + 1) == ([pool], []) and pool.nodes == ["n2"]
    named = book.create(ReservationSpec(name="named", start_time="now", duration="60", nodes="n3", users="u"),
                        "root", MONDAY, nodes, partitions, "p", [])
    nodes["n3"].base_state = NodeBase.DOWN
    assert book.maintain(nodes, partitions, [job], MONDAY + 2) == ([], []) and named.nodes == ["n3"]


def test_purge_comp_deletes_a_reservation_idle_for_its_time() -> None:
    book, nodes, partitions = _book_of_three()
    spec = ReservationSpec(name="r", start_time="now", duration="60", node_cnt=1, users="u", flags="PURGE_COMP=1")
    made = book.create(spec, "root", MONDAY, nodes, partitions, "p", [])
    assert made.purge_comp_s == 60
    assert book.maintain(nodes, partitions, [], MONDAY + 59) == ([], [])
    assert book.maintain(nodes, partitions, [], MONDAY + 60) == ([], [made]) and "r" not in book.by_name
    default = book.create(ReservationSpec(name="d", start_time="now", duration="60", node_cnt=1, users="u",
                                          flags="PURGE_COMP"), "root", MONDAY, nodes, partitions, "p", [])
    assert default.purge_comp_s == 300
    with pytest.raises(ReservationError, match="Invalid reservation flag: DAILY=1"):
        book.create(ReservationSpec(name="x", start_time="now", duration="60", node_cnt=1, users="u",
                                    flags="DAILY=1"), "root", MONDAY, nodes, partitions, "p", [])


def test_skip_moves_a_recurring_reservation_to_its_next_occurrence() -> None:
    """scontrol update ReservationName=X skip: as Slurm's, the current or coming window is dropped
    (a WEEKDAY one goes from Friday to Monday); a one-off or one in use is refused."""
    book, nodes, partitions = _book_of_three()
    friday = MONDAY + 4 * DAY
    made = book.create(ReservationSpec(name="wd", start_time="now", duration="60", node_cnt=1, users="u",
                                       flags="WEEKDAY"), "root", friday, nodes, partitions, "p", [])
    skipped = book.update("wd", ReservationSpec(skip=True), friday + 1, nodes, partitions, "p", [])
    assert skipped.start_time == made.start_time + 3 * DAY and skipped.end_time == skipped.start_time + 3600
    book.create(ReservationSpec(name="once", start_time="now", duration="60", node_cnt=1, users="u"),
                "root", friday, nodes, partitions, "p", [])
    with pytest.raises(ReservationError, match="not skipable, try deleting instead"):
        book.update("once", ReservationSpec(skip=True), friday + 1, nodes, partitions, "p", [])
    job = Job(job_id=1, name="j", uid=1, user="u", state=states.RUNNING, reservation="wd", start_time=friday,
              alloc=Allocation(alloc_cpus={"n1": 1}))
    with pytest.raises(ReservationError, match="in use"):
        book.update("wd", ReservationSpec(skip=True), friday + 2, nodes, partitions, "p", [job])
