"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

    with ModelServer(scripted({"What is 2+2?": ["5", "4"]})) as server:
        ...  # point a client at server.base_url ("http://127.0.0.1:<port>/v1")

It serves ``POST /v1/chat/completions`` (streaming and not) and ``GET /v1/models`` on an
OS-assigned loopback port, from its own thread and event loop, and records every request on
``server.requests``. A script maps each request (:class:`ChatCall`) to a :class:`Reply`: text,
reasoning, tool calls or one of the faults in ``FAULTS``; a fault with ``times=n`` fires on the
first n requests of its call in one run, then the call is answered normally. ``max_tokens`` cuts
the reply to that many words (one word is one token) with ``finish_reason="length"``; usage
counts words (``usage=False`` sends none).

A run is named by its base URL: ``server.run_url("a")`` (``/run/a/v1``) is run ``a``,
``server.base_url`` (``/v1``) the unnamed one. verifiers 0.4.0 sends no rollout index and no run
id, only the same messages for every rollout of a task and a fresh ``X-Session-ID`` per rollout,
so :class:`PerRollout` numbers a run's sessions in order of arrival.

As a command, ``python -m verifiers_stepwise.testing.server --port 8000 --reply 40 --reply 42``
prints its base URL on the first line of stdout and serves until SIGINT or SIGTERM (docs/writing-envs.md,
"The local test model server"); ``spawned("42")`` runs it from Python until the block ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from verifiers_stepwise.loopback import ThreadedServer

__all__ = [
    "ChatCall",
    "ModelServer",
    "PerRollout",
    "RecordedRequest",
    "Reply",
    "ToolCallReply",
    "scripted",
    "spawned",
]

Fault = Literal["http_500", "http_400", "http_429", "timeout", "no_done", "stream_error", "malformed_json", "empty"]
MODEL = "scripted-model"
"""The model ``GET /v1/models`` lists, and a completion names when its request names none."""
CONTEXT_ERROR = "request (4476 tokens) exceeds the available context size (4096 tokens)"
"""The message of the ``stream_error`` fault (llama.cpp's wording)."""


@dataclass(frozen=True)
class ToolCallReply:
    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None
    """Defaults to ``call_<k>_<i>`` for the i-th call of model call k."""

    def wire(self, default_id: str) -> dict:
        """The call as a chat completion carries it."""
        arguments = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)
        return {
            "id": self.id or default_id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


@dataclass(frozen=True)
class Reply:
    content: str | None = None
    reasoning: str | None = None
    """Sent as ``reasoning_content`` (the DeepSeek/Qwen field)."""
    tool_calls: Sequence[ToolCallReply] = ()
    fault: Fault | None = None
    times: int | None = None
    """How many requests the fault answers before the call is answered normally (None: all)."""


@dataclass(frozen=True)
class ChatCall:
    """One chat-completions request as the script sees it."""

    body: dict
    session: str | None = None
    """The ``X-Session-ID`` header: verifiers sends the rollout's trace id."""
    run: str | None = None
    """The run the request's path names (``/run/<run>/v1/...``; None for ``/v1/...``)."""

    @property
    def messages(self) -> list[dict]:
        return list(self.body.get("messages") or [])

    @property
    def prompt(self) -> str:
        """The text of the first user message: what identifies the conversation."""
        return next((_text(m.get("content")) for m in self.messages if m.get("role") == "user"), "")

    @property
    def index(self) -> int:
        """Which model call of its conversation this is (0 for the first)."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


Script = Callable[[ChatCall], "Reply | str"]
Plan = Sequence["Reply | str | Callable[[ChatCall], Reply | str]"]


class PerRollout:
    """Different plans for the rollouts of one prompt: the k-th rollout (session) of a prompt in
    a run (:attr:`ChatCall.run`) to reach the server follows ``plans[k % len(plans)]``. Calls in
    one run (``run_groups`` in a test, twice, against ``server.base_url``) share its count; a
    fresh ``PerRollout`` counts from 0."""

    def __init__(self, *plans: Plan) -> None:
        self.plans = [list(plan) for plan in plans]
        self._sessions: dict[tuple[str | None, str], dict[str | None, int]] = {}
        self._lock = threading.Lock()

    def plan(self, call: ChatCall) -> list:
        with self._lock:
            sessions = self._sessions.setdefault((call.run, call.prompt), {})
            k = sessions.setdefault(call.session, len(sessions))
        return self.plans[k % len(self.plans)]


def scripted(conversations: Mapping[str, Plan | PerRollout], default: Reply | str = "ok") -> Script:
    """A script answering each conversation from its own list of replies.

    ``conversations`` maps a piece of a conversation's first user message to its replies: the
    first key contained in the prompt picks the list, and model call k gets entry k (the last
    entry answers every call past the end; an entry may be a function of the request).
    Conversations no key matches get ``default``.
    """
    for key, plan in conversations.items():
        for steps in plan.plans if isinstance(plan, PerRollout) else [plan]:
            if not steps:
                raise ValueError(f"conversation {key!r} scripts no reply")

    def script(call: ChatCall) -> Reply | str:
        prompt = call.prompt
        plan = next((p for key, p in conversations.items() if key in prompt), None)
        if plan is None:
            return default
        steps = plan.plan(call) if isinstance(plan, PerRollout) else plan
        step = steps[min(call.index, len(steps) - 1)]
        return step(call) if callable(step) else step

    return script


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict | None


class ModelServer(ThreadedServer):
    """The server; use as a context manager or call ``start()``/``stop()``."""

    what = "model server"

    def __init__(
        self,
        script: Script | None = None,
        *,
        hang_seconds: float = 60.0,
        port: int = 0,
        retry_after: float = 1.0,
        usage: bool = True,
    ) -> None:
        self.script = script or (lambda call: "ok")
        self.hang_seconds = hang_seconds
        self.retry_after = retry_after
        self.usage = usage
        """False: no usage at all, in a body or a stream (as some servers do)."""
        self.requests: list[RecordedRequest] = []
        super().__init__(port)
        self._fired: dict[tuple[str | None, str, int], int] = {}
        self._lock = threading.Lock()
        # What a hanging reply waits on; each start makes a fresh one in the server's loop (_open).
        self._closing = asyncio.Event()

    def run_url(self, run: str) -> str:
        """The base URL of run ``run``, ``http://127.0.0.1:<port>/run/<run>/v1``: its rollouts
        are numbered apart from every other run's (:class:`PerRollout`, ``times``)."""
        return self.base_url.removesuffix("/v1") + f"/run/{run}/v1"

    @property
    def chat_requests(self) -> list[dict]:
        """Bodies of the chat-completions requests received so far, in arrival order."""
        with self._lock:
            return [r.body for r in self.requests if r.path.endswith("/chat/completions") and r.body]

    # -- lifecycle ----------------------------------------------------------------------------

    async def _open(self) -> list[web.RouteDef]:
        self._closing = asyncio.Event()
        return [
            web.post("/v1/chat/completions", self._chat),
            web.post("/chat/completions", self._chat),
            web.post("/run/{run}/v1/chat/completions", self._chat),
            web.get("/v1/models", self._models),
            web.get("/run/{run}/v1/models", self._models),
        ]

    def stop(self) -> None:
        if self._loop is not None:  # wake the streams waiting on it, in the server's loop
            self._loop.call_soon_threadsafe(self._closing.set)
        super().stop()

    # -- handlers -----------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        self._record(request, None)
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            self._record(request, None)
            return _error(400, "request body is not JSON")
        self._record(request, body)
        call = ChatCall(body, request.headers.get("X-Session-ID"), request.match_info.get("run"))
        reply = self.script(call)
        if isinstance(reply, str):
            reply = Reply(content=reply)
        fault = self._fault(call, reply)
        if fault is not None:
            answer = FAULTS[fault](self, request, call, reply)
            return await answer if inspect.isawaitable(answer) else answer
        return await self._answer(request, call, reply)

    async def _answer(
        self, request: web.Request, call: ChatCall, reply: Reply, done: bool = True
    ) -> web.StreamResponse:
        """The completion, as one JSON body or as SSE chunks ending in ``data: [DONE]`` (without
        it, ``done=False``: keepalive comments for ``hang_seconds`` instead)."""
        completion = self._completion(call, reply)
        if not self.usage:
            del completion["usage"]
        if not call.stream:
            return web.json_response(completion)
        include_usage = self.usage and bool((call.body.get("stream_options") or {}).get("include_usage"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for chunk in _chunks(completion, include_usage):
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if not done:
            await self._keep_alive(response)
            return response
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _keep_alive(self, response: web.StreamResponse) -> None:
        """SSE comments every 0.1 s, and never the end of the stream, for ``hang_seconds``."""
        end = time.monotonic() + self.hang_seconds
        with contextlib.suppress(ConnectionError):
            while time.monotonic() < end and not self._closing.is_set():
                await response.write(b": keepalive\n\n")
                await asyncio.sleep(0.1)

    def _record(self, request: web.Request, body: dict | None) -> None:
        with self._lock:
            self.requests.append(RecordedRequest(request.path, dict(request.headers), body))

    def _fault(self, call: ChatCall, reply: Reply) -> Fault | None:
        if reply.fault is None:
            return None
        if reply.times is None:
            return reply.fault
        key = (call.run, call.prompt, call.index)
        with self._lock:
            fired = self._fired.get(key, 0)
            self._fired[key] = fired + 1
        return reply.fault if fired < reply.times else None

    def _completion(self, call: ChatCall, reply: Reply) -> dict:
        body = call.body
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        content = reply.content
        finish = "tool_calls" if reply.tool_calls else "stop"
        if content is not None and limit is not None and len(content.split()) > limit:
            content = " ".join(content.split()[:limit])
            finish = "length"
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reply.reasoning is not None:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [tc.wire(f"call_{call.index}_{i}") for i, tc in enumerate(reply.tool_calls)]
        prompt_tokens = sum(_words(_text(m.get("content"))) for m in call.messages)
        completion_tokens = (
            _words(content or "")
            + _words(reply.reasoning or "")
            + sum(_words(tc["function"]["arguments"]) for tc in message.get("tool_calls", []))
        )
        return {
            "id": f"chatcmpl-{call.index}-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or MODEL,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _chunks(completion: dict, include_usage: bool) -> list[dict]:
    """The completion as OpenAI stream chunks: role, reasoning, content in pieces, tool calls,
    the finish chunk, and the usage chunk when asked for."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        chunks.append(chunk({"reasoning_content": message["reasoning_content"]}))
    content = message.get("content") or ""
    for start in range(0, len(content), 16):
        chunks.append(chunk({"content": content[start : start + 16]}))
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {"index": i, "id": call["id"], "type": "function", "function": function | {"arguments": ""}}
        chunks.append(chunk({"tool_calls": [opening]}))
        arguments = function["arguments"]
        for start in range(0, len(arguments), 16):
            chunks.append(
                chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments[start : start + 16]}}]})
            )
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    return chunks


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "server_error", "code": status}}
    return web.json_response(body, status=status, headers=headers)


def _sse_or_json(call: ChatCall, streamed: bytes, plain: bytes, plain_status: int = 200) -> web.Response:
    """``streamed`` as a 200 event stream to a streamed request, else ``plain`` as a JSON body."""
    if call.stream:
        return web.Response(body=streamed, content_type="text/event-stream")
    return web.Response(body=plain, status=plain_status, content_type="application/json")


async def _timeout(server: ModelServer, *_: object) -> web.Response:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server._closing.wait(), server.hang_seconds)
    return _error(504, "scripted fault: answered after the hang")


_CONTEXT_ERROR = json.dumps({"error": {"code": 400, "message": CONTEXT_ERROR, "type": "exceed_context_size_error"}})
_MALFORMED = b'{"id": "x", "choices": ['
FaultAnswer = Callable[
    [ModelServer, web.Request, ChatCall, Reply], "web.StreamResponse | Awaitable[web.StreamResponse]"
]
FAULTS: dict[Fault, FaultAnswer] = {
    "http_500": lambda server, *_: _error(500, "scripted fault: internal server error"),
    # A request error, not worth retrying.
    "http_400": lambda server, *_: _error(400, "scripted fault: the request exceeds the maximum context length"),
    "http_429": lambda server, *_: _error(
        429, "scripted fault: rate limited", {"Retry-After": f"{server.retry_after:g}"}
    ),
    # No answer until the server stops or ``hang_seconds`` pass.
    "timeout": _timeout,
    # Every chunk, then only SSE keepalive comments, never ``data: [DONE]``, for ``hang_seconds``.
    "no_done": lambda server, request, call, reply: server._answer(request, call, reply, done=False),
    # What llama.cpp does past its context: HTTP 200 and one error event to a streamed request, else HTTP 400.
    "stream_error": lambda server, request, call, reply: _sse_or_json(
        call, f"data: {_CONTEXT_ERROR}\n\n".encode(), _CONTEXT_ERROR.encode(), 400
    ),
    # A body or SSE event that is not JSON.
    "malformed_json": lambda server, request, call, reply: _sse_or_json(
        call, b"data: " + _MALFORMED + b"\n\ndata: [DONE]\n\n", _MALFORMED
    ),
    # HTTP 200 with no body at all.
    "empty": lambda server, request, call, reply: _sse_or_json(call, b"", b""),
}
"""How each fault is answered (``Reply.fault``)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _words(text: str) -> int:
    return len(text.split())


@contextlib.contextmanager
def spawned(reply: str) -> Iterator[str]:
    """Run ``python -m verifiers_stepwise.testing.server --reply <reply> --until-stdin-closes`` in
    its own process and yield its base URL; the process ends when the block does."""
    process = subprocess.Popen(
        [sys.executable, "-m", __name__, "--reply", reply, "--until-stdin-closes"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None  # both are PIPEs
    try:
        yield process.stdout.readline().strip()
    finally:
        process.stdin.close()
        if process.wait(timeout=30) != 0:
            raise RuntimeError(f"the model server process exited {process.returncode}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m verifiers_stepwise.testing.server",
        description="A local OpenAI-compatible chat-completions server on 127.0.0.1 answering with fixed replies. "
        "Prints its base URL on the first line, then serves until SIGINT or SIGTERM.",
    )
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one from the OS)")
    parser.add_argument(
        "--reply",
        action="append",
        help="the text of every reply (default 'ok'); given several times, rollout k of each prompt gets the k-th, "
        "cycling",
    )
    parser.add_argument(
        "--until-stdin-closes",
        action="store_true",
        help="serve until stdin reaches end of file instead of until a signal (how spawned() runs it)",
    )
    args = parser.parse_args(argv)
    stop = threading.Event()
    if not args.until_stdin_closes:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
    server = ModelServer(scripted({"": PerRollout(*([reply] for reply in args.reply or ["ok"]))}), port=args.port)
    try:
        server.start()
    except RuntimeError as error:  # e.g. the port is taken
        parser.exit(1, f"error: {error}\n")
    try:
        print(server.base_url, flush=True)
        if args.until_stdin_closes:
            sys.stdin.read()
        else:
            print("serving; stop with Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
            stop.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
