"""What the env side uses of verifiers that older releases in the supported range lack.

The package supports verifiers 0.3.1 (PyPI), prime-rl's pinned pre-release ``a60a606``
(``0.3.1.dev62``; prime-rl 559b447's ``deps/verifiers``) and 0.4.x. Each name below is taken
from verifiers where it exists (feature detection on import, never a patch of verifiers) and
otherwise defined here with what the older release offers:

    bound_tool_message    verifiers.v1.harnesses.utils (0.4.0) older: the message as it is
    connect_mcp/call_mcp  verifiers.v1.harnesses.utils (0.4.0) older: absent, see MCP_TOOLS
    TAKE, VIEW            Taskset.take/_view (0.4.0)           older: Taskset.head/view

0.3.1 and a60a606 have no shared MCP helpers, so the ``stepwise-chat`` harness runs MCP tool
servers on 0.4.x only and refuses a task with tool servers on older releases, naming the
version; chat without tools works on all. On older releases the only tool messages the harness
writes are its own short errors and the tool gate's denials, passed on unchanged. Checked
against verifiers 0.3.1, a60a606 and 0.4.0 (``tests/test_verifiers_compat.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

import verifiers.v1 as vf

from verifiers_stepwise.errors import HostMismatch

__all__ = ["MCP_TOOLS", "TAKE", "VIEW", "bound_tool_message", "call_mcp", "connect_mcp", "require_mcp_tools"]

TAKE, VIEW = ("take", "_view") if hasattr(vf.Taskset, "take") else ("head", "view")
"""The names of a taskset's first-n view and of its transformed view (``getattr(taskset, TAKE)(n)``)."""

try:
    from verifiers.v1.harnesses.utils.compaction import bound_tool_message
    from verifiers.v1.harnesses.utils.mcp import call_mcp, connect_mcp

    MCP_TOOLS = True
except ImportError:  # verifiers < 0.4
    MCP_TOOLS = False

    def bound_tool_message(message: dict) -> dict:
        return message

    async def connect_mcp(config: dict, stack: Any) -> tuple[list[dict], dict, dict]:
        raise AssertionError("unreachable: require_mcp_tools refuses tool servers on this verifiers")

    call_mcp = connect_mcp


def require_mcp_tools(servers: Mapping[str, str]) -> None:
    """Raise, naming the servers and the installed verifiers, when it cannot run MCP tools."""
    if servers and not MCP_TOOLS:
        raise HostMismatch(
            f"the stepwise-chat harness runs MCP tool servers with verifiers >= 0.4 only "
            f"(installed: {version('verifiers')}); this task has tool servers {sorted(servers)}"
        )
