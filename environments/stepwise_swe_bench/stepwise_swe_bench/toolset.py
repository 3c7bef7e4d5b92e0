"""The model's tools as a verifiers MCP toolset: ``bash``, ``view``, ``edit``, ``create``, ``submit``.

One server per eval, on this machine: the taskset declares it (``SweBenchTaskset.toolsets``), so
verifiers (0.4.0 checked: ``verifiers.v1.mcp.launch.serve_shared``) starts
``python -m stepwise_swe_bench.toolset`` once, before the first rollout, instead of once per
rollout (seconds each: the interpreter, verifiers' imports and its launcher's one-second polls).
Every call carries its rollout's state coordinates, signed by verifiers with a secret only the
server and the env hold; the server pulls that rollout's shared state (``SweBenchState``), finds
its repository there (``state.box``, set by task setup) and runs the call through a ``Sandbox``
opened over that repository for this call alone, so no call can reach another rollout's
repository. Every call counts against the rollout's step and time budget and is recorded; a tool
that fails answers with the reason instead of raising.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import verifiers.v1 as vf

from .box import open_sandbox
from .output import CommandResult
from .sandbox import Sandbox
from .state import SweBenchState
from .tools import ToolError, create_file, edit_file, run_command, view_path

__all__ = ["SweToolset"]

SUBMITTED = (
    "Submitted. Stop calling tools and reply with a one-line summary of your change; "
    "the repository will then be graded."
)


class SweToolset(vf.Toolset[vf.SharedToolsetConfig, SweBenchState]):
    TOOL_PREFIX = None  # advertised bare: bash, view, edit, create, submit

    async def _call(
        self, tool: str, detail: str, action: Callable[[Sandbox, int], Awaitable[tuple[str, CommandResult]]]
    ) -> str:
        state = self.state
        if state.box is None:
            return "The repository is not ready; this call was not run."
        refusal = state.refusal(time.time())
        if refusal is not None:
            state.record({"tool": tool, "input": detail[:500], "refused": True})
            return refusal
        start = time.monotonic()
        try:
            text, result = await action(open_sandbox(state.box), state.budget.tool_output_chars)
        except ToolError as error:
            state.record({"tool": tool, "input": detail[:500], "error": str(error)})
            return f"Error: {error}"
        except Exception as error:  # noqa: BLE001 - a broken sandbox is the model's answer too
            state.record({"tool": tool, "input": detail[:500], "error": repr(error)[:500]})
            return f"The tool failed: {type(error).__name__}: {error}"
        entry: dict = {"tool": tool, "input": detail[:500], "seconds": round(time.monotonic() - start, 3)}
        if isinstance(result, CommandResult):
            entry |= {k: v for k, v in result.record(300).items() if k != "command"}
        state.record(entry)
        return text

    @vf.tool
    async def bash(self, command: str) -> str:
        """Run a bash command in the repository (/testbed). Each command starts a fresh shell:
        no network, a time limit, and long output is shortened."""
        return await self._call("bash", command, lambda sb, cap: run_command(sb, command, cap))

    @vf.tool
    async def view(self, path: str, start_line: int = 1, end_line: int | None = None) -> str:
        """Show a file's lines with line numbers (optionally only start_line..end_line), or a
        directory's entries two levels deep. Paths are relative to /testbed or absolute."""
        return await self._call("view", path, lambda sb, cap: view_path(sb, path, start_line, end_line, cap))

    @vf.tool
    async def edit(self, path: str, old: str, new: str) -> str:
        """Replace the text `old`, which must occur exactly once in the file, with `new`."""
        return await self._call("edit", path, lambda sb, cap: edit_file(sb, path, old, new, cap))

    @vf.tool
    async def create(self, path: str, content: str) -> str:
        """Write `content` to the file at `path`, creating directories and replacing any file."""
        return await self._call("create", path, lambda sb, cap: create_file(sb, path, content, cap))

    @vf.tool
    async def submit(self, summary: str = "") -> str:
        """Submit your work on the issue for grading (ends the round)."""
        state = self.state
        state.submitted = True
        state.record({"tool": "submit", "input": summary[:500]})
        return SUBMITTED


if __name__ == "__main__":
    SweToolset.run()
