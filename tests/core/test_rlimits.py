"""PropagateResourceLimits' choice among the submitting shell's soft limits (wattsched.rlimits)."""

from __future__ import annotations

import resource

import pytest

from wattsched import rlimits


def test_the_shells_soft_limits_by_slurms_names() -> None:
    found = rlimits.current()
    assert set(found) == set(rlimits.LIMITS)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert found["NOFILE"] == (rlimits.UNLIMITED if soft == resource.RLIM_INFINITY else soft)


@pytest.mark.parametrize(("propagate", "excepted", "kept"), [
    ("ALL", "", {"CORE", "NOFILE", "STACK"}), ("ALL", "CORE", {"NOFILE", "STACK"}), ("NONE", "", set()),
    ("core,stack", "STACK", {"CORE"}),
])
def test_the_site_chooses_which_go(propagate: str, excepted: str, kept: set[str]) -> None:
    sent = {"CORE": 0, "NOFILE": 1000, "STACK": -1}
    assert set(rlimits.chosen(sent, propagate, excepted)) == kept


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(ValueError, match="Invalid resource limit name: NOPE"):
        rlimits.names("CORE,NOPE")
