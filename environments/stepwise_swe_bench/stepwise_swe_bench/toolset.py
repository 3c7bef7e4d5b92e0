"""The model's tools as a verifiers MCP toolset: ``bash``, ``view``, ``edit``, ``create``, ``submit``.

Verifiers launches the server per rollout (``python -m stepwise_swe_bench.toolset``) on this
machine; it finds the repository through the rollout's shared state (``SweBenchState.box``) and
runs everything through a ``Sandbox`` over it. Every call counts against the step and time
budget and is recorded; a tool that fails answers with the reason instead of raising.
"""

from __future__ import annotations

import time

import verifiers.v1 as vf

from .box import BoxRef, open_sandbox
from .output import CommandResult
from .sandbox import Sandbox
from .state import SweBenchState
from .tools import ToolError, create_file, edit_file, run_command, view_path

__all__ = ["SweToolset"]

SUBMITTED = (
    "Submitted. Stop calling tools and reply with a one-line summary of your change; "
    "the repository will then be graded."
)


class SweToolset(vf.Toolset[vf.ToolsetConfig, SweBenchState]):
    TOOL_PREFIX = None  # advertised bare: bash, view, edit, create, submit

    def __init__(self, config: vf.ToolsetConfig) -> None:
        super().__init__(config)
        self._box: BoxRef | None = None
        self._sandbox: Sandbox | None = None

    async def _sandbox_for(self, box: BoxRef) -> Sandbox:
        if self._sandbox is None or box != self._box:
            self._sandbox = await self._exit_stack.enter_async_context(open_sandbox(box))
            self._box = box
        return self._sandbox

    async def _call(self, tool: str, detail: str, action) -> str:
        state = self.state
        if state.box is None:
            return "The repository is not ready; this call was not run."
        refusal = state.refusal(time.time())
        if refusal is not None:
            state.record({"tool": tool, "input": detail[:500], "refused": True})
            return refusal
        start = time.monotonic()
        try:
            text, result = await action(await self._sandbox_for(state.box), state.budget.tool_output_chars)
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
