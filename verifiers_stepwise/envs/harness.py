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

Model errors: HTTP 408/5xx answers, broken streams and transport errors are retried
(``max_retries``, exponential ``retry_backoff``) with the ``x-stainless-retry-count`` header the
interception server's replay guard keys on; any other 4xx ends the segment at once, and the
rollout records the interception's own account of the failure, status and message.

A streamed attempt that the interception answered with a failure (an error status, or an
error event in the stream it had committed) is retried without streaming. Verifiers 0.4.0's
interception relays an upstream error answered before the stream starts with its status, but
reads a 200 stream that carries a ``data: {"error": ...}`` event and then ends (llama.cpp does
so for a request past its context) as ``upstream stream ended before its terminal event``
(502, the event dropped; ``_collect_stream``). A plain request gets the upstream's status and
body relayed (``EvalClient._request``), so the one retry puts e.g. ``upstream 400: ... context
size`` on the trace, and a 400 is not retried again. A failed attempt commits no turn, so the
changed body cannot commit one twice; a stream cut short (transport error, no ``[DONE]``) may
have been committed and is retried unchanged, for the interception's replay guard (keyed on
the body) to serve that turn. With ``max_retries=0`` the 502 stays the error.

Rate limits: a 429 is retried for as long as the call's deadline allows (not counted against
``max_retries``), after its ``Retry-After`` when the endpoint sends one, else after the
back-off (``retry_backoff`` doubling per 429, at most 8 s); a wait that would pass the
deadline ends the call at once with the 429. The interception (0.4.0) answers an upstream 429
with its own JSON error and drops the upstream's ``Retry-After``, so through ``vf-eval`` the
back-off is what waits: the upstream may be asked again sooner than it said, but the waits
double, so a rate-limited call sends a few requests, not one per ``retry_backoff``.

Deadlines: a model call ends at ``call_timeout`` (every attempt and wait included) and no call
runs past the rollout's ``episode_timeout``, however many keepalives arrive: the interception
server keeps a slow stream alive with one every 3 s, so ``request_timeout`` (per read) never
fires on it. A call past its deadline raises ``ModelCallError`` (status 408), which the rollout
records as its error; earlier turns keep what they recorded and the run goes on.

Runs on verifiers 0.3.1, a60a606 and 0.4.x; MCP tool servers need 0.4.x
(``verifiers_stepwise.envs.compat``). Checked against verifiers 0.4.0 (``verifiers/v1/harness.py``,
``harnesses/null``, ``harnesses/utils``, ``interception/server.py``, ``clients/eval.py``,
``dialects/chat.py``).
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
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.base import is_sse_done_event, parse_sse_event
from verifiers.v1.dialects.chat import ChatDialect, message_to_wire
from verifiers.v1.interception.server import RETRY_COUNT_HEADER

from verifiers_stepwise.envs.compat import (
    agent_config_fields,
    bound_tool_message,
    call_mcp,
    connect_mcp,
    require_mcp_tools,
)
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
    (or in ``~/.local/bin``, where verifiers installs it): verifiers would then fetch uv (pip,
    else curl) at the first episode, inside the env server, and offline every episode would
    fail there, errored rollouts instead of a stopped run. A container runtime brings its own
    uv and is not checked. With uv present the first episode still needs the package index
    (or a warm uv cache) for the program's dependencies; that is not checked."""
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
    """Retries of a model call answered with 408/5xx, a broken stream or a transport error (not
    streamed). A 429 (rate limit) is retried until ``call_timeout``, after its ``Retry-After``
    when given, else after the back-off."""
    retry_backoff: float = Field(0.5, ge=0)
    """Seconds before the first retry; doubled for each further one, at most 8 s (429s and other
    failures keep separate counts)."""
    request_timeout: float | None = Field(None, gt=0)
    """Seconds httpx waits for each read of a model call (None: no read timeout). The
    interception server's keepalives reset it, so it cannot end a call: ``call_timeout`` does."""
    call_timeout: float | None = Field(600.0, gt=0)
    """Seconds one model call may take in total: every attempt and every wait between them,
    whatever keepalives arrive meanwhile (None: unbounded). Past it the call is the turn's error."""
    episode_timeout: float | None = Field(None, gt=0)
    """Seconds from the rollout's start after which no model call may still run (None: unbounded)."""


class ModelCallError(RuntimeError):
    """The interception endpoint refused or failed a model call."""

    def __init__(
        self, message: str, status_code: int | None = None, retry_after: float | None = None, reported: bool = False
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after
        """Seconds the endpoint asked to wait (its ``Retry-After`` header), if it said."""
        self.reported = reported
        """The endpoint itself answered with the failure (an error status or an error event in
        its stream), so the interception committed no turn for the attempt."""

    @property
    def retryable(self) -> bool:
        """Transport-level failures, 408, 429 and 5xx; any other 4xx would fail again."""
        return self.status_code is None or self.status_code in (408, 429) or self.status_code >= 500


def _retry_after(headers: httpx.Headers) -> float | None:
    """A ``Retry-After`` in seconds (the HTTP-date form is not used by model servers)."""
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, ValueError):
        return None


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
        self._http: httpx.AsyncClient | None = None
        self._tools: list[dict] = []
        self._dispatch: dict[str, tuple[str, str]] = {}
        self._servers: dict = {}

    @property
    def config(self) -> StepwiseChatConfig:
        return self.harness.config

    @property
    def _client(self) -> httpx.AsyncClient:
        """The HTTP client, opened by the first ``_run``."""
        if self._http is None:
            raise RuntimeError("the chat session's HTTP client is used before the session is open")
        return self._http

    async def _run(self, messages: vf.Messages | None) -> vf.ProgramResult:
        if self._http is None:
            await self._open()
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

    async def _open(self) -> None:
        self._http = await self._stack.enter_async_context(
            httpx.AsyncClient(timeout=httpx.Timeout(self.config.request_timeout, connect=5.0), verify=_ssl_context())
        )
        if self.mcp_urls:
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
        """Send ``body`` until it is answered: after a 429 until the deadline, after any other
        retryable failure ``max_retries`` times, each retry after its wait (``_backoff``, or the
        429's ``Retry-After``). A streamed attempt the endpoint failed is retried without
        streaming, one cut short as it was (see the module docstring)."""
        stream = self.config.stream
        attempt = failures = limited = 0
        while True:
            headers = {"Authorization": f"Bearer {self.secret}"}
            if attempt:
                headers[RETRY_COUNT_HEADER] = str(attempt)
            try:
                return await self._send(body, headers, stream)
            except (ModelCallError, httpx.TransportError) as error:
                failure = error
            if isinstance(failure, ModelCallError) and failure.status_code == 429:
                wait = self._backoff(limited) if failure.retry_after is None else failure.retry_after
                if time.time() + wait >= deadline:
                    message = f"{failure} (rate limited: waiting {wait:g} s would pass the deadline)"
                    raise ModelCallError(message, 429) from failure
                limited += 1
            elif (isinstance(failure, ModelCallError) and not failure.retryable) or failures == self.config.max_retries:
                raise failure
            else:
                wait = self._backoff(failures)
                failures += 1
                stream = stream and not (isinstance(failure, ModelCallError) and failure.reported)
            await asyncio.sleep(wait)
            attempt += 1

    def _backoff(self, retries: int) -> float:
        """Seconds before the retry that follows ``retries`` earlier ones of the same kind."""
        return min(MAX_BACKOFF, self.config.retry_backoff * 2**retries)

    async def _send(self, body: dict, headers: dict[str, str], stream: bool) -> vf.Response:
        """One attempt: ``body`` as an SSE stream (usage asked for) or for one JSON answer."""
        if stream:
            body = body | {"stream": True, "stream_options": {"include_usage": True}}
        url = f"{self.endpoint}/chat/completions"
        async with self._client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code >= 400:
                text = _error_text(await response.aread())
                raise ModelCallError(text, response.status_code, _retry_after(response.headers), reported=True)
            if stream:
                return await _read_stream(response)
            try:
                return _DIALECT.parse_response(_DIALECT.validate_response(json.loads(await response.aread())))
            except ValueError as error:
                raise ModelCallError(f"malformed completion from the interception endpoint: {error}") from error

    async def _tool_result(self, call: vf.ToolCall) -> dict:
        """The tool message answering ``call``: the gate's verdict when it denies the call, else
        the MCP server's result (or an error text the model can act on)."""
        try:
            arguments: Any = json.loads(call.arguments or "{}")
            problem = (
                None
                if isinstance(arguments, dict)
                else (f"error: tool arguments must be a JSON object, got {type(arguments).__name__}")
            )
        except json.JSONDecodeError as error:
            arguments = call.arguments
            problem = f"error: invalid JSON in tool arguments ({error}); resend the call with valid JSON"
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
        """Ask the rollout's tool gate before running ``call`` (allow, deny or stop)."""
        response = await self._client.post(
            self.tool_interception_url,
            json={"tool_call_id": call.id, "name": call.name, "arguments": arguments},
            headers={"Authorization": f"Bearer {self.secret}"},
        )
        response.raise_for_status()
        verdict = response.json()
        if verdict["action"] == "stop":
            raise ModelCallError(f"rollout stopped: {verdict['reason']}", 400)
        return verdict


async def _read_stream(response: httpx.Response) -> vf.Response:
    """The completion an SSE answer carries, assembled when ``data: [DONE]`` arrives."""
    parser = _DIALECT.stream_parser()
    event: list[str] = []
    async for line in response.aiter_lines():
        if line:
            event.append(line)
        elif _feed(parser, event):
            return parser.finish()
    if _feed(parser, event):  # a last event without its closing blank line
        return parser.finish()
    raise ModelCallError("the model stream ended before data: [DONE]")


def _feed(parser: Any, lines: list[str]) -> bool:
    """Hand one SSE event (its lines, cleared here) to the parser; True at ``data: [DONE]``.
    An error event (the interception reports a failure after the stream began) raises."""
    raw = "\n".join(lines).encode()
    lines.clear()
    if is_sse_done_event(raw):
        return True
    if b'"error"' in raw and "error" in (chunk := parse_sse_event(raw) or {}):
        raise ModelCallError(_error_message(chunk), reported=True)
    parser.feed(raw)
    return False


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One context per process: loading the CA bundle takes tens of milliseconds, which a fresh
    httpx client would pay at every rollout (the endpoint is https only behind a tunnel)."""
    return ssl.create_default_context(cafile=certifi.where())


def _error_text(body: bytes) -> str:
    try:
        return _error_message(json.loads(body))
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:2000] or "empty error body"


def _error_message(payload: dict) -> str:
    """The message of an OpenAI-style ``{"error": ...}`` payload."""
    error = payload.get("error")
    return str(error.get("message", error) if isinstance(error, dict) else error)
