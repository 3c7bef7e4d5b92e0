"""An in-process chat harness for verifiers v1 (harness id ``stepwise-chat``).

The built-in ``null`` harness relaunches a uv-managed Python program for every segment of an
exchange. This harness runs the same chat loop inside the rollout's own event loop: it posts
to the interception endpoint it is handed (so the trace, limits, ``@stop`` checks, sampling
overrides and usage records are exactly the framework's), runs the model's tool calls against
the task's MCP tool servers, and returns when the model answers without a tool call. No
subprocess, no uv, no package index.

Per rollout, one :class:`ChatSession` keeps its HTTP connection to the interception server and
its MCP connections open across turns. Each later turn (``Harness.resume``) replays the
trace's current branch — the conversation exactly as the interception committed it — plus the
caller's new messages. With ``exclude_think`` the replayed assistant messages of earlier turns
lose their reasoning (``reasoning_content``/``reasoning_details`` and ``<think>…</think>``
text) before the model sees them; the current turn, tool loop included, keeps its own. The
graph then forks at the first rewritten message, so each turn ends on its own branch.

Model calls go through the OpenAI SDK's client, as verifiers' own harnesses do: its per-read
timeout, its retries of a 408, a 5xx or a transport error, its SSE decoding, and its
``x-stainless-retry-count`` header, on which the interception's replay guard keys.
:meth:`ChatSession._attempts` adds what the interception needs and the SDK cannot do, each
commented where it applies. A call past its deadline (``call_timeout``, ``episode_timeout``)
raises ``ModelCallError`` (408), which the rollout records as its error; earlier turns keep what
they recorded and the run goes on.

Runs on verifiers 0.3.1, a60a606 and 0.4.x; MCP tool servers need 0.4.x
(``verifiers_stepwise.envs.compat``). Checked against verifiers 0.4.0 (``verifiers/v1/harness.py``,
``harnesses/null``, ``harnesses/utils/core.py``, ``interception/server.py``,
``clients/eval.py``, ``dialects/chat.py``) and openai 2.54 (``_base_client.py``, ``_streaming.py``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import re
import shutil
import ssl
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import certifi
import httpx
import openai
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.agent import agent_config_fields
from verifiers.v1.dialects.chat import ChatDialect, message_to_wire
from verifiers.v1.interception.server import RETRY_COUNT_HEADER

from verifiers_stepwise.envs.compat import bound_tool_message, call_mcp, connect_mcp, require_mcp_tools
from verifiers_stepwise.errors import ConfigError

__all__ = [
    "UV_HARNESSES",
    "ChatSession",
    "ModelCallError",
    "StepwiseChatConfig",
    "StepwiseChatHarness",
    "refuse_a_uv_harness_without_uv",
    "strip_think",
]

HARNESS_ID = "stepwise-chat"
MAX_BACKOFF = 8.0

_DIALECT = ChatDialect()
_THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)
_OPEN_THINK = re.compile(r"<think>.*\Z", re.DOTALL)


UV_HARNESSES = ("null", "bash", "terminus_2", "mini_swe_agent", "browser_use")
"""verifiers 0.4.0's built-in harnesses that run their program with uv (``Runtime.prepare_uv_script``:
``uv sync --script``, then the script's interpreter); ``bash`` is also the harness of an agent
that names none and whose taskset brings none."""


def refuse_a_uv_harness_without_uv(environment: Any, where: str) -> None:
    """Raise ConfigError when an agent of ``environment`` (a resolved verifiers ``EnvConfig``)
    runs one of ``UV_HARNESSES`` on the local ``subprocess`` runtime and no ``uv`` is on ``PATH``
    or in ``~/.local/bin``: verifiers would fetch uv at the first episode, and offline every
    episode would fail (errored rollouts instead of a stopped run). A container runtime brings
    its own uv. That the package index (or a warm uv cache) is reachable is not checked."""
    from verifiers.v1.utils.loaders import default_harness_id

    if shutil.which("uv") or shutil.which("uv", path=str(Path.home() / ".local" / "bin")):
        return
    taskset = getattr(getattr(environment, "taskset", None), "id", "") or ""
    for name, agent in agent_config_fields(environment).items():
        harness = agent.harness.id if agent.harness is not None else default_harness_id(taskset)
        if harness in UV_HARNESSES and isinstance(agent.runtime, vf.SubprocessConfig):
            raise ConfigError(
                f"{where}: agent {name!r} runs verifiers' {harness!r} harness on the subprocess runtime, "
                "which runs its program with uv, and no uv is on PATH: verifiers would download uv at the "
                "first episode, and offline every episode would fail. Use this package's in-process "
                f"harness ({name}.harness.id = {HARNESS_ID!r}: no uv, no package index), or install uv "
                "(pip install uv) and run the first episode where the package index is reachable"
            )


class StepwiseChatConfig(vf.HarnessConfig):
    id: vf.ID = HARNESS_ID
    stream: bool = True
    """Request SSE streams (usage comes in the stream's last chunk), or one JSON body each."""
    exclude_think: bool = False
    """Drop earlier turns' reasoning from the context of later turns (Kevin's recipe)."""
    max_retries: int = Field(2, ge=0)
    """Retries of a model call answered with 408 or 5xx, broken after its answer began, or
    failed in transport: the OpenAI SDK's ``max_retries`` (its back-off, 0.5 s doubling to 8 s,
    jittered), shared with the harness's own retries of a stream. A 429 (rate limit) is retried
    until the call's deadline instead, after its ``Retry-After`` when given, else after
    ``retry_backoff``."""
    retry_backoff: float = Field(0.5, ge=0)
    """Seconds before the harness's own first retry (of a 429, or of a failed stream); doubled
    for each further one, at most 8 s (429s and streams keep separate counts)."""
    request_timeout: float | None = Field(None, gt=0)
    """Seconds the SDK waits for each read of a model call (None: no read timeout). The
    interception keeps a slow stream alive with a keepalive every 3 s, so this cannot end a
    call: ``call_timeout`` does."""
    call_timeout: float | None = Field(600.0, gt=0)
    """Seconds one model call may take in total, every attempt and wait included (None: unbounded)."""
    episode_timeout: float | None = Field(None, gt=0)
    """Seconds from the rollout's start after which no model call may still run (None: unbounded)."""


class ModelCallError(RuntimeError):
    """The interception endpoint refused or failed a model call."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code

    @property
    def retryable(self) -> bool:
        """Transport-level failures, 408, 429 and 5xx; any other 4xx would fail again."""
        return self.status_code is None or self.status_code in (408, 429) or self.status_code >= 500


def strip_think(message: vf.AssistantMessage) -> vf.AssistantMessage:
    """The message without its reasoning: reasoning fields dropped, ``<think>…</think>``
    blocks removed from the text (and an unclosed trailing ``<think>…``, and everything up to
    a lone ``</think>``, whose opening tag was in the prompt template). A message with no
    reasoning at all is returned as it is (not even its whitespace changes), so the trace's
    branch does not fork at it."""
    content = message.content
    has_tags = content is not None and ("<think>" in content or "</think>" in content)
    if not has_tags and message.reasoning_content is None and message.provider_state is None:
        return message
    if has_tags:
        # Blocks close before the last </think>: matching only there keeps the sub linear (an
        # unclosed <think> makes the lazy pattern scan to the end, once per such tag).
        closed = content.rfind("</think>") + len("</think>")
        closed = len(content) - len(content[closed:].lstrip()) if closed >= len("</think>") else 0
        content = _THINK_BLOCK.sub("", content[:closed]) + content[closed:]
        if "</think>" in content:
            content = content.rsplit("</think>", 1)[1]
        content = _OPEN_THINK.sub("", content).strip()
    return message.model_copy(update={"content": content, "reasoning_content": None, "provider_state": None})


class StepwiseChatHarness(vf.Harness[StepwiseChatConfig]):
    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    SUPPORTS_RESUME = True
    SUPPORTS_TOOL_INTERCEPTION = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def session(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> ChatSession:
        return ChatSession(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        """One segment on the task's own prompt, in a session of its own."""
        args = (ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)
        return await self._segment(None, *args)

    async def resume(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        messages: vf.Messages,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        """The next segment: the trace's current branch plus ``messages``, in a session of its own."""
        args = (ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)
        return await self._segment(messages, *args)

    async def _segment(self, messages: vf.Messages | None, *args: Any) -> vf.ProgramResult:
        session = await self.session(*args)
        try:
            return await session._run(messages)
        finally:
            await session.close()


class ChatSession(vf.HarnessSession):
    """One rollout's chat loop; its HTTP and MCP connections live until ``close()``."""

    harness: StepwiseChatHarness

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stack = AsyncExitStack()
        self._client = openai.AsyncOpenAI(
            base_url=self.endpoint,
            api_key=self.secret,
            max_retries=self.config.max_retries,
            timeout=httpx.Timeout(self.config.request_timeout, connect=5.0),
            http_client=openai.DefaultAsyncHttpxClient(
                verify=_ssl_context(), event_hooks={"response": [_final_for_the_sdk]}
            ),
        )
        self._stack.push_async_callback(self._client.close)
        self._tools: list[dict] | None = None
        """The MCP servers' tools, listed by the first ``_run``."""
        self._dispatch: dict[str, tuple[str, str]] = {}
        self._servers: dict = {}

    @property
    def config(self) -> StepwiseChatConfig:
        return self.harness.config

    async def _run(self, messages: vf.Messages | None) -> vf.ProgramResult:
        if self._tools is None:
            await self._connect_tools()
        conversation = self._conversation(messages)
        while True:
            reply = (await self._complete(conversation)).message
            conversation.append(message_to_wire(reply))
            if not reply.tool_calls:
                return vf.ProgramResult(exit_code=0, stdout="", stderr="")
            for call in reply.tool_calls:
                conversation.append(await self._tool_result(call))

    async def close(self) -> None:
        await self._stack.aclose()
        await super().close()

    async def _connect_tools(self) -> None:
        self._tools = []
        if not self.mcp_urls:
            return
        require_mcp_tools(self.mcp_urls)
        headers = self.config.resolve_mcp_headers(self.mcp_urls)
        servers = {
            name: {"url": url, "timeout": self.config.tool_timeout, "headers": headers.get(name)}
            for name, url in self.mcp_urls.items()
        }
        tools, dispatch, self._servers = await asyncio.wait_for(
            connect_mcp({"mcpServers": servers}, self._stack), self.config.tool_timeout
        )
        disabled = set(self.config.disabled_tools or ())
        self._tools = [tool for tool in tools if tool["function"]["name"] not in disabled]
        self._dispatch = {name: target for name, target in dispatch.items() if name not in disabled}

    def _conversation(self, messages: vf.Messages | None) -> list[dict]:
        """The request's messages: the task's prompt for the first segment, else the trace's
        current branch (earlier reasoning removed under ``exclude_think``) plus ``messages``."""
        system, prompt = self.harness.resolve_prompt(self.data)
        if messages is None:
            context: list[vf.Message] = (
                [vf.UserMessage(content=prompt)] if isinstance(prompt, str) else list(prompt or [])
            )
            if system:
                context.insert(0, vf.SystemMessage(content=system))
        else:
            # The current branch ends at the newest leaf (verifiers < 0.4 has no graph.path).
            context = list(self.trace.branches[-1].messages) if self.trace.nodes else []
            if not context and system:
                context.append(vf.SystemMessage(content=system))
            if self.config.exclude_think:
                context = [strip_think(m) if isinstance(m, vf.AssistantMessage) else m for m in context]
            context += messages
        return [message_to_wire(m) for m in context]

    async def _complete(self, conversation: list[dict]) -> vf.Response:
        """One model call, retries included, within its deadline (``_deadline``)."""
        body: dict[str, Any] = {"model": self.ctx.model, "messages": conversation}
        if self._tools:
            body["tools"] = self._tools
        deadline, what = self._deadline()
        if deadline <= time.time():
            raise ModelCallError(f"no model call may start: the {what} has passed", 408)
        try:
            async with asyncio.timeout(deadline - time.time()) as limit:
                return await self._attempts(body, deadline)
        except TimeoutError:
            if not limit.expired():
                raise
            raise ModelCallError(f"the model call ran past the {what}", 408) from None

    def _deadline(self) -> tuple[float, str]:
        """When the current model call must be over (wall clock), and which limit that is."""
        limits = [(math.inf, "no deadline")]
        if self.config.call_timeout is not None:
            limits.append((time.time() + self.config.call_timeout, f"call_timeout of {self.config.call_timeout:g} s"))
        if self.config.episode_timeout is not None:
            end = self.trace.timing.start + self.config.episode_timeout
            limits.append((end, f"episode_timeout of {self.config.episode_timeout:g} s"))
        return min(limits)

    async def _attempts(self, body: dict, deadline: float) -> vf.Response:
        """Send ``body`` until it is answered: the SDK's retries, and ours (module docstring),
        which share ``max_retries`` with them; 429s are waited out until ``deadline``."""
        stream = self.config.stream
        attempt = retries = limited = 0
        while True:
            # Our retries say so as the SDK's do: the interception's replay guard serves a turn it
            # committed to a request that repeats its body with a retry count above 0.
            headers = {RETRY_COUNT_HEADER: str(attempt)} if attempt else None
            try:
                if stream:
                    return await self._streamed(body, headers)
                answer = await self._client.with_options(
                    max_retries=self.config.max_retries - retries
                ).chat.completions.with_raw_response.create(**body, extra_headers=headers)
                return _DIALECT.parse_response(_DIALECT.validate_response(json.loads(answer.text)))
            except openai.RateLimitError as error:
                # The SDK is told not to retry a 429 (_final_for_the_sdk), which it would count
                # against max_retries. verifiers 0.4.0's interception drops the upstream's
                # Retry-After, so through vf-eval the back-off is what waits.
                wait = self._backoff(limited) if (after := _retry_after(error.response)) is None else after
                if time.time() + wait >= deadline:
                    message = f"{_message(error)} (rate limited: waiting {wait:g} s would pass the deadline)"
                    raise ModelCallError(message, 429) from error
                limited += 1
            except (openai.APIError, httpx.TransportError, ValueError, ModelCallError) as error:
                failure = _model_call_error(error)
                # A plain request's error answers and transport errors were the SDK's to retry.
                spent = not stream and isinstance(error, openai.APIError)
                if spent or not failure.retryable or retries >= self.config.max_retries:
                    raise failure from error
                # A streamed attempt answered with a failure (a status, or an error event) committed
                # nothing; its retry is plain, because verifiers 0.4.0's interception relays a plain
                # request's upstream status and body, but reads a 200 stream that ends in an error
                # event (llama.cpp's, past its context) as "upstream stream ended before its
                # terminal event" (502, the event dropped). So the trace gets e.g. "upstream 400:
                # ... context size", which is not retried again. One that broke after its answer
                # began (cut short, garbled) may have been committed: it is retried unchanged, for
                # the replay guard (keyed on the body) to serve that turn.
                answered = isinstance(error, openai.APIError) and not isinstance(error, openai.APIConnectionError)
                stream = stream and not answered
                wait = self._backoff(retries)
                retries += 1
            await asyncio.sleep(wait)
            attempt += 1

    def _backoff(self, retries: int) -> float:
        """Seconds before the retry that follows ``retries`` earlier ones of the same kind."""
        return min(MAX_BACKOFF, self.config.retry_backoff * 2**retries)

    async def _streamed(self, body: dict, headers: dict[str, str] | None) -> vf.Response:
        """One streamed attempt, without the SDK's retries (``_attempts`` decides), its usage
        asked for. The reply is assembled by verifiers' own stream parser, the one the
        interception committed the turn with, so the next request replays that turn as it is
        on the trace (a message that differs would fork the trace's graph)."""
        chunks = await self._client.with_options(max_retries=0).chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}, extra_headers=headers
        )
        parser = _DIALECT.stream_parser()
        finished = False
        async for chunk in chunks:
            finished = finished or any(choice.finish_reason for choice in chunk.choices)
            parser.feed(b"data: " + chunk.to_json(indent=None).encode())
        if not finished:
            raise ModelCallError("the model stream ended before its last chunk (no finish_reason)")
        return parser.finish()

    async def _tool_result(self, call: vf.ToolCall) -> dict:
        """The tool message answering ``call``: the gate's verdict when it denies the call, else
        the MCP server's result (or an error text the model can act on)."""
        problem = None
        try:
            arguments: Any = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as error:
            arguments = call.arguments
            problem = f"error: invalid JSON in tool arguments ({error}); resend the call with valid JSON"
        if problem is None and not isinstance(arguments, dict):
            problem = f"error: tool arguments must be a JSON object, got {type(arguments).__name__}"
        if self.tool_interception_url:
            verdict = await self._gate(call, arguments)
            if verdict["action"] == "deny":
                return bound_tool_message(verdict["message"])
        if problem is not None:
            content: Any = problem
        elif call.name in self._dispatch:
            content = await call_mcp(self._servers, self._dispatch, call.name, arguments)
        else:
            content = f"error: unknown tool {call.name!r}"
        return bound_tool_message({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})

    async def _gate(self, call: vf.ToolCall, arguments: Any) -> dict:
        """Ask the rollout's tool gate before running ``call`` (allow, deny or stop), once."""
        verdict = await self._client.post(
            self.tool_interception_url,
            cast_to=dict[str, Any],
            body={"tool_call_id": call.id, "name": call.name, "arguments": arguments},
            options={"max_retries": 0},
        )
        if verdict["action"] == "stop":
            raise ModelCallError(f"rollout stopped: {verdict['reason']}", 400)
        return verdict


async def _final_for_the_sdk(response: httpx.Response) -> None:
    """Mark the answers the SDK must not retry with its own ``x-should-retry: false``: a 429,
    which ``_attempts`` waits out up to the call's deadline (the SDK would count it against
    ``max_retries`` and sleep a ``Retry-After`` of up to two minutes whatever the deadline), and
    a 409, the interception's "rollout concluded" (the SDK retries a 409 as a lock timeout)."""
    if response.status_code in (409, 429):
        response.headers["x-should-retry"] = "false"


def _retry_after(response: httpx.Response) -> float | None:
    """A ``Retry-After`` in seconds (the HTTP-date form is not used by model servers)."""
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def _message(error: openai.APIError) -> str:
    """The endpoint's own message: the ``message`` of its OpenAI-style error body, if any."""
    return str(error.body.get("message", error.message) if isinstance(error.body, dict) else error.message)


def _model_call_error(error: Exception) -> ModelCallError:
    """The failure of one attempt as the ``ModelCallError`` a final one raises."""
    if isinstance(error, openai.APIStatusError):
        return ModelCallError(_message(error), error.status_code)
    if isinstance(error, openai.APIConnectionError):  # the transport's own error says which
        cause = error.__cause__
        return ModelCallError(f"{error.message} ({type(cause).__name__}: {cause})" if cause else error.message)
    if isinstance(error, openai.APIError):  # an error event in the stream
        return ModelCallError(_message(error))
    if isinstance(error, ModelCallError):
        return error
    if isinstance(error, ValueError):
        return ModelCallError(f"malformed completion from the interception endpoint: {error}")
    return ModelCallError(f"{type(error).__name__}: {error}")  # the transport failed mid-stream


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One context per process: loading the CA bundle takes tens of milliseconds, which a fresh
    httpx client would pay at every rollout (the endpoint is https only behind a tunnel)."""
    return ssl.create_default_context(cafile=certifi.where())
