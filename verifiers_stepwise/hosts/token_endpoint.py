"""The token-in/token-out endpoint verifiers' train client calls, with the generator injected.

Verifiers 0.4.0's ``TrainClient`` (``verifiers/v1/clients/train.py``) renders each prompt to
token ids itself and calls ``renderers.client.generate`` (renderers 0.1.12), which posts to
vLLM's endpoint at the server root (both checked in their 0.4.0 / 0.1.12 sources):

    POST /inference/v1/generate, header ``X-Session-ID`` = the trace id (plus the client
      config's ``headers``)
      {"model", "token_ids": [int], "sampling_params": {"max_tokens", "temperature", "top_p",
       "seed", ..., "stop_token_ids": [int], "logprobs": 1}}   (only the fields the run sets)
    -> {"request_id", "prompt_token_ids": [int],
        "choices": [{"index": 0, "token_ids": [int], "finish_reason": "stop" | "length",
                     "logprobs": {"content": [{"token": "token_id:<id>", "logprob": float}]}}]}

and reads ``GET /v1/models`` once per (base_url, model) for the card's ``max_model_len`` (the
card served here has none: the client's pre-flight length check is off). ``generate_routes``
serves that protocol through an injected ``generate``; a malformed request answers HTTP 400
naming the field, and a ``generate`` that raises or returns None answers ``failure_status``,
which verifiers records as a model error on the trace. Served by torchtitan's async generator
(``hosts.torchtitan.verifiers``, 503) and TRL's batching endpoint
(``hosts.trl.inference.endpoint``, 500).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = [
    "SESSION_HEADER",
    "AsyncGenerate",
    "GenerateRequest",
    "Generation",
    "generate_routes",
    "parse_request",
]

SESSION_HEADER = "X-Session-ID"  # verifiers.v1.clients.client.SESSION_ID_HEADER (0.4.0)


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    """One ``/inference/v1/generate`` call, as the generator sees it (``parse_request``)."""

    prompt_ids: list[int]
    max_tokens: int | None = None
    """None: until a stop token or the model's context ends."""
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """``sampling_params`` as sent: only the fields the client set (verifiers drops unset ones)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """As sent (case-insensitive from aiohttp); ``SESSION_HEADER`` names the trace."""


@dataclass(frozen=True, slots=True)
class Generation:
    """The sampled completion: one logprob per token; ``finish_reason`` as vLLM reports it
    (``"stop"``: it ends in a stop token, ``"length"``: cut at ``max_tokens``)."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "stop"

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} completion tokens but {len(self.logprobs)} logprobs")


AsyncGenerate = Callable[[GenerateRequest], Awaitable[Generation | None]]
"""Answers one request; None (no completion) fails it like an exception does."""


def parse_request(body: Any, headers: Mapping[str, str] | None = None) -> GenerateRequest:
    """The request a ``/inference/v1/generate`` body asks for; raises ValueError naming a bad field."""
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    ids = body["token_ids"]
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and t >= 0 for t in ids):
        raise ValueError("token_ids must be a non-empty list of token ids")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise ValueError("sampling_params must be a JSON object")
    return GenerateRequest(prompt_ids=ids, **_sampling(params), sampling=params, headers=headers or {})


def _sampling(params: dict[str, Any]) -> dict[str, Any]:
    """The sampling fields of ``GenerateRequest`` from ``sampling_params``, each checked."""
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"sampling_params.max_tokens must be a positive integer, got {max_tokens!r}")
    temperature = float(params.get("temperature", 1.0))
    top_p = float(params.get("top_p", 1.0))
    if not (math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"sampling_params.temperature must be >= 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"sampling_params.top_p must be in (0, 1], got {top_p}")
    seed = params.get("seed")
    return {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "stop_token_ids": tuple(int(t) for t in params.get("stop_token_ids") or ()),
        "seed": int(seed) if seed is not None else None,
    }


def generate_routes(generate: AsyncGenerate, *, failure_status: int) -> list[web.RouteDef]:
    """``POST /inference/v1/generate`` answered by ``generate``, and ``GET /v1/models`` listing
    one model, ``policy``, with no ``max_model_len``."""
    ids = itertools.count()

    async def generate_route(http: web.Request) -> web.Response:
        try:
            request = parse_request(await http.json(), http.headers)
        except (ValueError, TypeError, KeyError) as error:
            return _error(400, f"bad generate request: {error}")
        try:
            generation = await generate(request)
        except Exception as error:  # the trace records it as a model error; the run goes on
            return _error(failure_status, f"generation failed: {type(error).__name__}: {error}")
        if generation is None:
            return _error(failure_status, "generation failed: the generator produced no completion")
        content = [
            {"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(generation.token_ids, generation.logprobs)
        ]
        choice = {
            "index": 0,
            "token_ids": generation.token_ids,
            "finish_reason": generation.finish_reason,
            "logprobs": {"content": content},
        }
        return web.json_response(
            {"request_id": f"gen-{next(ids)}", "prompt_token_ids": request.prompt_ids, "choices": [choice]}
        )

    async def models_route(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "policy", "object": "model"}]})

    return [web.post("/inference/v1/generate", generate_route), web.get("/v1/models", models_route)]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "generate_error", "code": status}}, status=status)
