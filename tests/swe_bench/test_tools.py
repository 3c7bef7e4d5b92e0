from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from stepwise_swe_bench.sandbox import Sandbox
from stepwise_swe_bench.state import MAX_RECORDS, Budget, SweBenchState
from stepwise_swe_bench.tools import ToolError, create_file, edit_file, run_command, view_path

from .conftest import run


def text(coroutine) -> str:
    return asyncio.run(coroutine)[0]


def sh(sandbox: Sandbox, command: str) -> str:
    result = run(sandbox, command)
    assert result.exit_code == 0, result.output
    return result.output


def test_view_numbers_lines_and_lists_directories(sandbox: Sandbox):
    sh(sandbox, "mkdir pkg .git && printf 'a = 1\\nb = 2\\nc = 3\\n' > pkg/mod.py")
    assert text(view_path(sandbox, "pkg/mod.py", 2, 3, 1000)) == "     2  b = 2\n     3  c = 3\n"
    listing = text(view_path(sandbox, ".", 1, None, 1000))
    assert "./pkg/mod.py" in listing and ".git" not in listing
    assert "No such file" in text(view_path(sandbox, "missing.py", 1, None, 1000))
    with pytest.raises(ToolError):
        asyncio.run(view_path(sandbox, "pkg/mod.py", 3, 2, 1000))


def test_edit_replaces_exactly_one_occurrence(sandbox: Sandbox):
    sh(sandbox, "printf 'x = 1\\ny = 1\\n' > m.py")
    shown = text(edit_file(sandbox, "m.py", "y = 1", "y = 2", 1000))
    assert sh(sandbox, "cat m.py") == "x = 1\ny = 2\n" and "     2  y = 2" in shown
    with pytest.raises(ToolError, match="occurs 2 times"):
        asyncio.run(edit_file(sandbox, "m.py", "= ", "== ", 1000))
    with pytest.raises(ToolError, match="does not occur"):
        asyncio.run(edit_file(sandbox, "m.py", "z = 3", "z = 4", 1000))
    with pytest.raises(ToolError, match="must not be empty"):
        asyncio.run(edit_file(sandbox, "m.py", "", "z", 1000))


def test_create_makes_directories_and_keeps_bytes(sandbox: Sandbox):
    content = "line one\n\ttabbed ünïcode\n"
    text(create_file(sandbox, "new/dir/file.txt", content, 1000))
    assert sh(sandbox, "cat new/dir/file.txt") == content


def test_file_tools_cannot_reach_host_files_through_symlinks(sandbox: Sandbox, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    sh(sandbox, f"ln -s {secret} link")
    assert "host secret" not in text(view_path(sandbox, "link", 1, None, 1000))
    with pytest.raises(ToolError, match="cannot read link"):
        asyncio.run(edit_file(sandbox, "link", "host", "sandbox", 1000))
    # The host path exists only as a fresh file in the sandbox's private /tmp.
    text(create_file(sandbox, str(secret), "overwritten", 1000))
    assert secret.read_text() == "host secret\n"


def test_long_tool_output_is_cut_in_the_middle(sandbox: Sandbox):
    shown, result = asyncio.run(run_command(sandbox, "seq 1 5000", 300))
    assert shown.startswith("1\n2\n") and "characters omitted" in shown and shown.endswith("[exit code 0]")
    assert len(shown) < 400 and result.output_bytes > 20_000


def test_round_and_episode_budgets():
    state = SweBenchState(budget=Budget(max_steps_per_round=2, max_steps=3, round_timeout_s=10, episode_timeout_s=100))
    state.episode_deadline = 1000.0 + 100
    state.start_round(0, now=1000.0)
    assert state.refusal(now=1001) is None and state.refusal(now=1002) is None
    assert "round's step or time budget" in state.refusal(now=1003)
    state.start_round(1, now=1004)
    assert (state.round, state.round_steps, state.submitted) == (1, 0, False)
    assert state.steps == 3 and not state.exhausted(now=1004)
    assert "episode's step or time budget" in state.refusal(now=1005)
    assert state.exhausted(now=1005)
    # Time: the round's deadline, then the episode's.
    timed = SweBenchState(budget=Budget(round_timeout_s=10, episode_timeout_s=100))
    timed.episode_deadline = 100.0
    timed.start_round(0, now=0.0)
    assert timed.refusal(now=5) is None
    assert "round's" in timed.refusal(now=11)
    assert "episode's" in timed.refusal(now=101) and timed.exhausted(now=101)


def test_the_record_stays_bounded():
    state = SweBenchState()
    for i in range(MAX_RECORDS + 50):
        state.record({"tool": "bash", "input": str(i)})
    assert len(state.records) == MAX_RECORDS
    assert state.records[0]["input"] == "0" and state.records[-1]["input"] == str(MAX_RECORDS + 49)


def test_a_path_that_looks_like_an_option_is_a_path(sandbox: Sandbox):
    """``view -delete`` once ran ``find -delete`` and wiped the working tree."""
    sh(sandbox, "mkdir ./-delete && echo x > ./-delete/inside.txt")
    listing = text(view_path(sandbox, "-delete", 1, None, 1000))
    assert "./-delete/inside.txt" in listing
    assert sh(sandbox, "cat hello.txt ./-delete/inside.txt") == "hello\nx\n"


def test_terminal_escapes_and_nuls_never_reach_the_model(sandbox: Sandbox):
    shown, result = asyncio.run(run_command(sandbox, r"printf '\033[2J\033]0;owned\007red\000\n'", 1000))
    assert "\x1b" in result.output and "\x00" in result.output  # the exact output is kept ...
    assert shown.startswith("red\n") and not {"\x1b", "\x00", "\x07"} & set(shown)  # ... not shown
    assert not {"\x1b", "\x00"} & set(result.record()["output"])
    sh(sandbox, r"printf 'a\033[31mb\000c\n' > esc.txt")
    assert text(view_path(sandbox, "esc.txt", 1, None, 1000)) == "     1  abc\n"
