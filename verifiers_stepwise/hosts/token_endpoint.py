"""A local token-in/token-out endpoint for verifiers' train client, with the generator injected.

    async with TokenEndpoint(generate) as endpoint:
        client = vf.TrainClientConfig(base_url=endpoint.base_url, api_key_var="", renderer=...)

Verifiers 0.4.0's ``TrainClient`` renders each prompt to token ids itself (``renderers``) and
calls ``renderers.client.generate``, which POSTs vLLM's ``/inference/v1/generate``:

    request   {"model", "token_ids": [...], "sampling_params": {..., "stop_token_ids",
               "logprobs": 1, "max_tokens", "temperature", "top_p", "seed"}}, header
              ``X-Session-ID`` = the trace id, plus the client config's ``headers``
    response  {"request_id", "choices": [{"token_ids": [...], "finish_reason",
               "logprobs": {"content": [{"token": "token_id:<id>", "logprob": x}, ...]}}]}

and reads ``GET /v1/models`` once per (base_url, model) for a ``max_model_len`` (an empty list
means "unknown", which disables the pre-flight length check). This module speaks exactly that
and nothing else; ``generate`` decides the tokens: torchtitan's generator in
``hosts.torchtitan_verifiers``, a script in tests. A ``generate`` that raises, or returns
None, answers HTTP 503 with the reason, which verifiers records as a model error on the trace.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["SESSION_HEADER", "TokenEndpoint", "TokenReply", "TokenRequest"]

SESSION_HEADER = "X-Session-ID"  # verifiers.v1.clients.client.SESSION_ID_HEADER (0.4.0)


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One generation request, as the train client sent it."""

    token_ids: list[int]
    sampling: dict[str, Any]
    model: str
    session_id: str | None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TokenReply:
    """The sampled completion: one logprob per token; ``finish_reason`` as vLLM reports it."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} completion tokens but {len(self.logprobs)} logprobs")


TokenGenerate = Callable[[TokenRequest], Awaitable[TokenReply | None]]


class TokenEndpoint:
    """Serves ``generate`` on an OS-assigned 127.0.0.1 port in the running event loop.

    ``base_url`` ends in ``/v1`` as verifiers' client configs expect; ``requests`` counts the
    generations served."""

    def __init__(self, generate: TokenGenerate) -> None:
        self._generate = generate
        self._ids = itertools.count()
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.requests = 0

    async def __aenter__(self) -> TokenEndpoint:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def start(self) -> None:
        app = web.Application(client_max_size=1 << 30)  # long contexts arrive as one JSON body
        app.router.add_post("/inference/v1/generate", self._serve)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    async def _serve(self, http: web.Request) -> web.Response:
        body = await http.json()
        request = TokenRequest(
            token_ids=list(body["token_ids"]),
            sampling=dict(body.get("sampling_params") or {}),
            model=body.get("model", ""),
            session_id=http.headers.get(SESSION_HEADER),
            headers=http.headers,
        )
        request_id = f"gen-{next(self._ids)}"
        try:
            reply = await self._generate(request)
        except Exception as error:  # the trace records it as a model error; the run goes on
            return web.json_response({"error": f"{type(error).__name__}: {error}"}, status=503)
        if reply is None:
            return web.json_response({"error": "the generator produced no completion"}, status=503)
        self.requests += 1
        content = [{"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(reply.token_ids, reply.logprobs)]
        choice = {"token_ids": reply.token_ids, "finish_reason": reply.finish_reason, "logprobs": {"content": content}}
        return web.json_response({"request_id": request_id, "choices": [choice]})
