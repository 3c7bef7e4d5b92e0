"""A tiny MCP toolset for tests: ``calculator_add``, ``calculator_multiply``, ``calculator_submit``.

Tool servers run as ``python -m <module>`` in the rollout's runtime, so the toolset lives in an
importable module. ``submit`` records its answer in the rollout's shared state, which a task's
reward can read.
"""

from __future__ import annotations

import verifiers.v1 as vf

__all__ = ["Calculator", "CalculatorState"]


class CalculatorState(vf.State):
    submitted: str | None = None


class Calculator(vf.Toolset[vf.ToolsetConfig, CalculatorState]):
    @vf.tool
    async def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @vf.tool
    async def multiply(self, a: int, b: int) -> str:
        """Multiply two integers."""
        return str(a * b)

    @vf.tool
    async def submit(self, answer: str) -> str:
        """Submit the final answer."""
        self.state.submitted = answer
        return "submitted"


if __name__ == "__main__":
    Calculator.run()
