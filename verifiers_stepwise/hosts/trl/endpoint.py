"""A token-level generate endpoint for verifiers' train client, with the generator injected.

verifiers 0.4.0's ``TrainClient`` (``verifiers/v1/clients/train.py``, through
``renderers.client.generate`` of renderers 0.1.12) renders each chat request to token ids
itself and posts them to a vLLM-style endpoint at the server root:

    POST /inference/v1/generate
      {"model": str, "token_ids": [int], "sampling_params": {"max_tokens", "temperature",
       "top_p", "stop_token_ids": [int], "logprobs": 1, ...}}
    -> {"request_id": str, "prompt_token_ids": [int],
        "choices": [{"token_ids": [int], "finish_reason": "stop" | "length",
                     "logprobs": {"content": [{"token": "token_id:<id>", "logprob": float}]}}]}

and reads ``GET /v1/models`` once for ``max_model_len`` (an over-long prompt is then refused
client-side). This module is only that HTTP layer: what answers is a ``generate`` function
handed in, called with every request waiting at that moment (so a model can batch them) on a
worker thread, never on the server's event loop. A generator that raises answers each request
of its batch with HTTP 500 and the error text, which the client reports as a model error; one
that puts an exception in place of a ``Generation`` fails only that request.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web

__all__ = ["GenerateFn", "GenerateRequest", "Generation", "TokenEndpoint"]


@dataclass(frozen=True)
class GenerateRequest:
    """One ``/inference/v1/generate`` call, as the generator sees it."""

    prompt_ids: list[int]
    max_tokens: int | None
    """None: until a stop token or the model's context ends."""
    temperature: float
    top_p: float
    stop_token_ids: tuple[int, ...]
    seed: int | None = None


@dataclass(frozen=True)
class Generation:
    """The generator's answer: sampled tokens, their logprobs and why sampling stopped."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "length"]


GenerateFn = Callable[[Sequence[GenerateRequest]], Sequence[Generation | Exception]]
"""Answers a batch of requests, one ``Generation`` (or the exception that failed it) each, in order."""


class TokenEndpoint:
    """Serves ``generate`` on ``http://127.0.0.1:<port>`` from its own thread; a context manager.

    ``base_url`` (``…/v1``) is what ``vf.TrainClientConfig(base_url=...)`` takes.
    ``batch_window`` seconds are waited after the first request of an idle endpoint so that
    requests sent together (the rollouts of a step) reach the generator as one batch.
    """

    def __init__(
        self,
        generate: GenerateFn,
        *,
        model: str = "policy",
        max_model_len: int | None = None,
        batch_window: float = 0.02,
    ) -> None:
        self.generate = generate
        self.model = model
        self.max_model_len = max_model_len
        self.batch_window = batch_window
        self.port = 0
        self.calls = 0
        """Generator calls made so far (each answers one batch)."""
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pending: list[tuple[GenerateRequest, asyncio.Future]] = []
        self._wake = asyncio.Event()  # made anew in the server's loop at each start (_open)
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> TokenEndpoint:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(self._loop, ready), name="token-endpoint", daemon=True
        )
        self._thread.start()
        ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"token endpoint failed to start: {self._error}") from self._error
        if not self.port:
            raise RuntimeError("token endpoint did not start within 30 s")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        loop, self._loop = self._loop, None
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(30)
        self._thread = None

    def __enter__(self) -> TokenEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        try:
            runner, worker = loop.run_until_complete(self._open())
        except BaseException as error:  # reported to start()
            self._error = error
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            worker.cancel()
            loop.run_until_complete(runner.cleanup())
            loop.close()

    async def _open(self) -> tuple[web.AppRunner, asyncio.Task]:
        self._wake = asyncio.Event()
        worker = asyncio.get_running_loop().create_task(self._work())
        app = web.Application(client_max_size=1024**3)
        app.router.add_post("/inference/v1/generate", self._generate)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]
        return runner, worker

    async def _models(self, request: web.Request) -> web.Response:
        card: dict[str, Any] = {"id": self.model, "object": "model"}
        if self.max_model_len is not None:
            card["max_model_len"] = self.max_model_len
        return web.json_response({"object": "list", "data": [card]})

    async def _generate(self, request: web.Request) -> web.Response:
        try:
            parsed = parse_request(await request.json())
        except (ValueError, TypeError, KeyError) as error:
            return _error(400, f"bad generate request: {error}")
        future = asyncio.get_running_loop().create_future()
        self._pending.append((parsed, future))
        self._wake.set()
        try:
            generation = await future
        except Exception as error:  # the generator failed this batch
            return _error(500, f"generation failed: {type(error).__name__}: {error}")
        return web.json_response(
            {
                "request_id": f"gen-{next(self._ids)}",
                "prompt_token_ids": parsed.prompt_ids,
                "choices": [
                    {
                        "index": 0,
                        "token_ids": generation.token_ids,
                        "finish_reason": generation.finish_reason,
                        "logprobs": {
                            "content": [
                                {"token": f"token_id:{t}", "logprob": lp}
                                for t, lp in zip(generation.token_ids, generation.logprobs)
                            ]
                        },
                    }
                ],
            }
        )

    async def _work(self) -> None:
        """Hand every waiting request to the generator at once, one batch at a time."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(self.batch_window)
            batch, self._pending = self._pending, []
            self._wake.clear()
            if not batch:
                continue
            self.calls += 1
            try:
                generations = await asyncio.to_thread(self.generate, [r for r, _ in batch])
                if len(generations) != len(batch):
                    raise RuntimeError(f"generator answered {len(generations)} of {len(batch)} requests")
            except Exception as error:
                for _, future in batch:
                    future.set_exception(error)
                continue
            for (_, future), generation in zip(batch, generations):
                if isinstance(generation, Exception):
                    future.set_exception(generation)
                else:
                    future.set_result(generation)


def parse_request(body: Any) -> GenerateRequest:
    """The request a ``/inference/v1/generate`` body asks for; raises ValueError naming a bad field."""
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    ids = body["token_ids"]
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and t >= 0 for t in ids):
        raise ValueError("token_ids must be a non-empty list of token ids")
    params = body.get("sampling_params") or {}
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
    return GenerateRequest(
        prompt_ids=ids,
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        stop_token_ids=tuple(int(t) for t in params.get("stop_token_ids") or ()),
        seed=int(seed) if seed is not None else None,
    )


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "generate_error", "code": status}}, status=status)
