"""srun --multi-prog's file (wattsched.multiprog): Slurm's grammar, checked by srun, read per task."""

from __future__ import annotations

import pytest

from wattsched.multiprog import MultiProgError, task_argv, validate

CONF = """# ranks  program
0      ./ctl --workers 3
1-3,5  ./worker --id %o --rank %t 'a b'  x\\ y %q
4      echo it\\
 goes on
*      ./idle
"""


def test_each_rank_gets_its_lines_program_with_the_extra_arguments() -> None:
    assert [task_argv(CONF, rank, ["E"]) for rank in range(8)] == [
        ["./ctl", "--workers", "3", "E"],
        ["./worker", "--id", "0", "--rank", "1", "a b", "x y", "", "E"],
        ["./worker", "--id", "1", "--rank", "2", "a b", "x y", "", "E"],
        ["./worker", "--id", "2", "--rank", "3", "a b", "x y", "", "E"],
        ["echo", "it", "goes", "on", "E"],  # a backslash last on its line continues it
        ["./worker", "--id", "3", "--rank", "5", "a b", "x y", "", "E"],
        ["./idle", "E"], ["./idle", "E"]]


def test_a_quote_may_go_on_over_a_line_break() -> None:
    assert task_argv("0 echo 'one \\\ntwo' three\n", 0, []) == ["echo", "one two", "three"]
    with pytest.raises(MultiProgError, match="format invalid"):
        task_argv("0 echo 'open\n", 0, [])


def test_the_count_is_the_ranks_named_unless_given() -> None:
    assert validate(CONF, None, "f") == 6  # 0-5 named; * covers what is left of them
    assert validate(CONF, 8, "f") == 8
    assert validate("* a\n", None, "f") == 1
    assert validate("0-2 a\n* b\n", None, "f") == 3
    assert validate("* a\n* b\n", 2, "f") == 2  # a second * names nothing new


@pytest.mark.parametrize(("text", "ntasks", "error"), [
    ("0 a\n0 b\n", None, "Duplicate record for task 0\nLine 2 of configuration file f invalid"),
    ("0 a\n2 b\n", None, "Configuration file f invalid, no record for task id 1"),
    ("0 a\n", 3, "Configuration file f invalid, no record for task id 1"),
    ("0 a\n1-5 b\n", 3, "Invalid task id, 5 >= ntasks\nLine 2 of configuration file f invalid"),
    ("3-1 a\n", None, "Invalid task range, 3-1\nLine 1 of configuration file f invalid"),
    ("* a\n1 b\n", None, "Task range specification with asterisk must be last\nLine 2 of configuration file f "
                         "invalid"),
    ("0\n", None, "Line 1 of configuration file f invalid"),
    ("x a\n", None, "Invalid task range specification (x)\nLine 1 of configuration file f invalid"),
    ("# nothing\n\n", None, "Configuration file f invalid, no record for task id 0"),
])
def test_srun_says_what_is_wrong_in_slurms_words(text: str, ntasks: int | None, error: str) -> None:
    with pytest.raises(MultiProgError) as caught:
        validate(text, ntasks, "f")
    assert str(caught.value) == error
