"""The moving budget's policy (wattsched.powerbalance), pure: unused power moves to the nodes that
would use it, the sum of the limits never passes the budget (floors aside), Slurm's thresholds,
rates and recent-job reset, and PowerParameters read with Slurm's names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched import powerbalance
from wattsched.powerbalance import BusyNode, Params

NOW = 10_000.0
OLD = NOW - 3600  # a job started an hour ago: no recent reset


def _node(name: str, limit: float | None, watts: float | None, start: float = OLD) -> BusyNode:
    return BusyNode(name, floor=100.0, top=400.0, limit=limit, watts=watts, job_start=start)


def test_power_a_node_leaves_unused_goes_to_a_node_that_would_use_it() -> None:
    nodes = {"a": _node("a", 250, 150), "b": _node("b", 250, 249)}  # a memory-bound, b compute-bound
    limits = powerbalance.balance(500, nodes, Params(), NOW)
    # a used 60 % of its limit: lowered by the smaller of 50 % of its span (150) and half its slack (50)
    assert limits["a"] == 200
    # b used over 95 %: raised by 20 % of its span (60), as far as what a left allows
    assert limits["b"] == 300
    assert sum(limits.values()) <= 500
    again = powerbalance.balance(500, {"a": _node("a", 200, 150), "b": _node("b", 300, 299)}, Params(), NOW)
    assert again == {"a": 175, "b": 325}


def test_a_node_within_its_thresholds_keeps_its_limit() -> None:
    nodes = {"a": _node("a", 250, 230), "b": _node("b", 250, 237)}  # 92 % and 94.8 %
    assert powerbalance.balance(500, nodes, Params(), NOW) == {"a": 250, "b": 250}


def test_a_new_job_and_a_node_never_limited_get_an_even_share_of_what_is_left() -> None:
    nodes = {"a": _node("a", 250, 230), "b": _node("b", None, None), "c": _node("c", 150, 100, start=NOW - 10)}
    limits = powerbalance.balance(700, nodes, Params(), NOW)
    assert limits["a"] == 250 and limits["b"] == limits["c"] == 225


def test_a_lowered_cap_cuts_every_limit_evenly_never_under_a_floor() -> None:
    nodes = {"a": _node("a", 300, 290 * 0.93), "b": _node("b", 300, 280), "c": _node("c", 120, 115)}
    limits = powerbalance.balance(450, nodes, Params(), NOW)  # was 720
    assert sum(limits.values()) == pytest.approx(450)
    assert all(limits[n] >= 100 for n in limits)
    assert limits["c"] == 100  # could give only 20: the others gave the rest
    floors = powerbalance.balance(150, nodes, Params(), NOW)  # under the floors: no node under its IdleWatts
    assert floors == {"a": 100, "b": 100, "c": 100}


def test_the_administrators_capwatts_and_maxwatts_bound_a_raise() -> None:
    node = BusyNode("a", floor=100.0, top=180.0, limit=170, watts=169, job_start=OLD)
    assert powerbalance.balance(10_000, {"a": node}, Params(), NOW) == {"a": 180}


def test_powerparameters_take_slurms_names_and_refuse_others() -> None:
    params = powerbalance.parse("balance_interval=10, lower_threshold=80,upper_threshold=90,decrease_rate=30,"
                                "increase_rate=10,recent_job=60")
    assert params == Params(10, 80, 90, 30, 10, 60)
    assert powerbalance.parse("") == Params()
    for bad, why in (("cap_watts=5", "unknown PowerParameters option 'cap_watts'"),
                     ("lower_threshold=x", "whole number"),
                     ("lower_threshold=99,upper_threshold=90", "lower_threshold"),
                     ("balance_interval=0", "balance_interval >= 1")):
        with pytest.raises(ValueError, match=why):
            powerbalance.parse(bad)


node_strategy = st.builds(
    lambda limit, used, recent: (limit, None if used is None or limit is None else limit * used, recent),
    st.one_of(st.none(), st.floats(100, 400)), st.one_of(st.none(), st.floats(0.0, 1.1)), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(node_strategy, min_size=1, max_size=12), st.floats(0, 5000))
def test_the_limits_never_pass_the_budget_nor_a_nodes_bounds(specs, budget: float) -> None:
    nodes = {}
    for index, (limit, watts, recent) in enumerate(specs):
        name = f"n{index:02d}"
        nodes[name] = _node(name, limit, None if limit is None else watts, start=NOW - 5 if recent else OLD)
    limits = powerbalance.balance(budget, nodes, Params(), NOW)
    assert set(limits) == set(nodes)
    assert all(100 - 1e-6 <= limits[n] <= 400 + 1e-6 for n in limits)
    assert sum(limits.values()) <= max(budget, 100 * len(nodes)) + 1e-6


def test_a_reading_taken_partly_under_an_older_limit_judges_nothing() -> None:
    """Just raised, a node's reading still shows part of the old limit: it keeps the new one."""
    raised = BusyNode("a", floor=100.0, top=400.0, limit=300, watts=200, job_start=OLD, settled=False)
    assert powerbalance.balance(1000, {"a": raised}, Params(), NOW) == {"a": 300}
    judged = BusyNode("a", floor=100.0, top=400.0, limit=300, watts=200, job_start=OLD)
    assert powerbalance.balance(1000, {"a": judged}, Params(), NOW) == {"a": 250}
