"""-N's node counts read as Slurm's verify_node_count reads them."""

from __future__ import annotations

import pytest

from wattsched import nodecount


@pytest.mark.parametrize(("text", "expected"), [
    ("4", (4, 0)), ("1-64", (1, 64)), ("-3", (1, 3)), (" 2 - 5 ", (2, 5)), ("2k", (2048, 0)),
    ("1-1m", (1, 1024 * 1024)), ("0", (0, 0)),
])
def test_counts(text: str, expected: tuple[int, int]) -> None:
    assert nodecount.parse(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("abc", '"abc" is not a valid node count'),
    ("2x", '"2x" is not a valid node count'),
    ("x-3", '"x" is not a valid node count'),
    ("4-2", "Maximum node count 2 is less than minimum node count 4"),
    ("3-", "Maximum node count -1 is less than minimum node count 3"),
    ("", '"" is not a valid node count'),
    ("1,4", '"1,4" is not a valid node count: lists of job sizes are not supported'),
    ("99999999999", '"99999999999" is not a valid node count'),
])
def test_refusals(text: str, message: str) -> None:
    with pytest.raises(nodecount.NodeCountError) as caught:
        nodecount.parse(text)
    assert str(caught.value) == message
