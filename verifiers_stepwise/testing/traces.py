"""Token-bearing verifiers v1 traces built through verifiers' own commit path.

:class:`TraceBuilder` commits each model call as verifiers' interception server does
(``graph.prepare_turn(trace, messages).commit(vf.Response(tokens=vf.TurnTokens(...)))``), with a
toy renderer instead of a model and a tokenizer: it reuses the token ids of the graph prefix the
context still matches (as a train client bridges onto its previous turn), gives every new message
one fresh id per word (at least one) and ends the prompt with one generation-prompt id. So tests
see real node layouts, new branches where the context was rewritten included.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import verifiers.v1 as vf
from verifiers.v1 import graph
from verifiers.v1.types import content_text

__all__ = ["TraceBuilder"]

GENERATION_PROMPT = 7


class TraceBuilder:
    """Grow one trace turn by turn: ``add(...)`` input messages, ``sample(...)`` model replies.

    ``tokens=False`` commits like the eval client: no token ids, logprobs or masks anywhere.
    """

    def __init__(
        self,
        prompt: str = "Solve the task.",
        system: str | None = "Answer briefly.",
        *,
        tokens: bool = True,
    ) -> None:
        self.tokens = tokens
        data = vf.TaskData(prompt=prompt, system_prompt=system)
        self.trace = vf.Trace(
            task=vf.TraceTask(type="Task", data=data),
            agent=vf.AgentInfo(config=vf.AgentConfig()),
        )
        self.context: list[vf.Message] = []
        if system is not None:
            self.context.append(vf.SystemMessage(content=system))
        self.context.append(vf.UserMessage(content=prompt))
        self._ids = itertools.count(100)

    def add(self, *messages: vf.Message) -> None:
        """Append input messages (user feedback, tool results) to the context."""
        self.context.extend(messages)

    def sample(
        self,
        content: str | None,
        *,
        reasoning: str | None = None,
        tool_calls: Sequence[vf.ToolCall] | None = None,
        n_tokens: int = 3,
    ) -> int:
        """Commit one model call on the current context; returns the new assistant node's index.

        The reply is appended to the context, so the next call continues this branch unless the
        context is rewritten first (``self.context`` is a plain list).
        """
        message = vf.AssistantMessage(
            content=content, reasoning_content=reasoning, tool_calls=list(tool_calls) if tool_calls else None
        )
        turn = graph.prepare_turn(self.trace, self.context)
        prompt_ids: list[int] = []
        spans: list[tuple[int, int] | None] = []
        for i, msg in enumerate(self.context):
            start = len(prompt_ids)
            if i < len(turn.prefix_node_ids):
                prompt_ids += self.trace.nodes[turn.prefix_node_ids[i]].token_ids
            else:
                words = len(content_text(msg.content).split()) if msg.content else 0
                prompt_ids += [next(self._ids) for _ in range(max(1, words))]
            spans.append((start, len(prompt_ids)))
        prompt_ids.append(GENERATION_PROMPT)
        completion = [next(self._ids) for _ in range(n_tokens)]
        response = vf.Response(
            id=f"call-{len(self.trace.calls)}",
            created=0,
            model="toy",
            message=message,
            finish_reason="tool_calls" if tool_calls else "stop",
            tokens=vf.TurnTokens(
                prompt_ids=prompt_ids,
                completion_ids=completion,
                completion_logprobs=[-0.5] * n_tokens,
                message_spans=spans,
            )
            if self.tokens
            else None,
        )
        node = turn.commit(response)
        self.trace.calls.append(vf.ModelCall(node=node, model="toy", finish_reason=response.finish_reason))
        self.context.append(message)
        return node

    def episode(self, reward: float | None = None) -> vf.Episode:
        """The trace as a finished, error-free episode; ``reward`` is recorded as its reward."""
        if reward is not None:
            self.trace.record_reward("reward", reward)
        self.trace.is_completed = self.trace.ok = True
        return vf.Episode(task=self.trace.task, traces=[self.trace], ok=True)
