"""Hostlists: the names clusters use are expanded and folded as ClusterShell's NodeSet does, without
importing it (wattsched.hostlist); the rest is NodeSet's, and every expression is bounded first."""

from __future__ import annotations

import pytest
from ClusterShell.NodeSet import NodeSet, NodeSetParseError, RangeSetParseError
from hypothesis import given, settings
from hypothesis import strategies as st

from wattsched import hostlist

PREFIX = st.sampled_from(["node", "n", "gpu-", "a", "x_", ""])
SUFFIX = st.sampled_from(["", "-ib", "b"])
INDEX = st.integers(0, 120).flatmap(lambda value: st.sampled_from([str(value), f"{value:02d}", f"{value:03d}"]))
NAME = st.one_of(st.builds(lambda p, i, s: f"{p}{i}{s}", PREFIX, INDEX, SUFFIX),
                 st.sampled_from(["login", "r1n1", "node1-ib2", "nodeA1", "N1", "a%1"]))
RANGE = st.builds(lambda first, size, pad: f"{first:0{pad}d}-{first + size:0{pad}d}" if size else f"{first:0{pad}d}",
                  st.integers(0, 60), st.integers(0, 12), st.sampled_from([0, 2, 3]))
ITEM = st.one_of(NAME, st.builds(lambda p, rs, s: f"{p}[{','.join(rs)}]{s}", PREFIX, st.lists(RANGE, min_size=1,
                                                                                            max_size=3), SUFFIX))


@settings(max_examples=400)
@given(st.lists(NAME, min_size=1, max_size=12))
def test_names_fold_as_nodeset_folds_them(names: list[str]) -> None:
    assert hostlist.compress(names) == str(NodeSet.fromlist(names))


@settings(max_examples=400)
@given(st.lists(ITEM, min_size=1, max_size=4).map(",".join))
def test_expressions_expand_as_nodeset_expands_them(expression: str) -> None:
    try:
        expected = list(NodeSet(expression))
    except (NodeSetParseError, RangeSetParseError):
        with pytest.raises(hostlist.HostlistError):
            hostlist.expand(expression)
        return
    assert hostlist.expand(expression) == expected
    assert hostlist.compress(expected) == str(NodeSet(expression))


def test_the_usual_names_need_no_clustershell() -> None:
    assert hostlist._simple_expand("node[01-03],login,gpu[7-9]-ib") == \
        ["gpu7-ib", "gpu8-ib", "gpu9-ib", "login", "node01", "node02", "node03"]
    assert hostlist._patterns(["node10", "node9", "node11"]) == [("node%s", ["9", "10", "11"])]
    assert hostlist.compress(["node03", "node01", "node02", "node07"]) == "node[01-03,07]"
    for other in ("r[1-2]n[1-2]", "node[1-9/2]", "node[01,1]", "rack1-node[1-2]"):  # NodeSet's
        assert hostlist._simple_expand(other) is None
        assert hostlist.expand(other) == list(NodeSet(other))


def test_an_expression_is_bounded_before_it_is_expanded() -> None:
    with pytest.raises(hostlist.HostlistError, match="more than"):
        hostlist.expand("node[1-3000000]")
    with pytest.raises(hostlist.HostlistError):
        hostlist.expand("node[3-1]")
    with pytest.raises(hostlist.HostlistError):  # a number int() will not read
        hostlist.expand("node" + "1" * 5000)


@settings(max_examples=2000)
@given(st.text(alphabet="n0123[]-,/ a%", max_size=14))
def test_what_the_lean_path_reads_it_reads_as_nodeset(expression: str) -> None:
    simple = hostlist._simple_expand(expression)
    if simple is not None:
        assert simple == list(NodeSet(expression))
