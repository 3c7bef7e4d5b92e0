"""The token endpoint for a local model: the waiting requests answered as one batch.

The protocol (``/inference/v1/generate`` as verifiers 0.4.0's train client speaks it, and
``/v1/models``) is ``hosts.token_endpoint``'s; this server adds the batching. The injected
``generate`` is called with every request waiting at that moment (so a model can batch them)
on a worker thread, never on the server's event loop, and the server runs from a thread of
its own. A generator that raises answers each request of its batch with HTTP 500 and the error
text, which the client reports as a model error; one that puts an exception in place of a
``Generation`` fails only that request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from aiohttp import web

from verifiers_stepwise.hosts.token_endpoint import GenerateRequest, Generation, generate_routes
from verifiers_stepwise.loopback import ThreadedServer

__all__ = ["GenerateFn", "TokenEndpoint"]

GenerateFn = Callable[[Sequence[GenerateRequest]], Sequence[Generation | Exception]]
"""Answers a batch of requests, one ``Generation`` (or the exception that failed it) each, in order."""


class TokenEndpoint(ThreadedServer):
    """Serves ``generate`` on ``http://127.0.0.1:<port>`` from its own thread; a context manager.

    ``base_url`` (``…/v1``) is what ``vf.TrainClientConfig(base_url=...)`` takes.
    ``batch_window`` seconds are waited after the first request of an idle endpoint so that
    requests sent together (the rollouts of a step) reach the generator as one batch.
    """

    what = "token endpoint"

    def __init__(
        self,
        generate: GenerateFn,
        *,
        model: str = "policy",
        max_model_len: int | None = None,
        batch_window: float = 0.02,
    ) -> None:
        super().__init__()
        self.generate = generate
        self.model = model
        self.max_model_len = max_model_len
        self.batch_window = batch_window
        self.calls = 0
        """Generator calls made so far (each answers one batch)."""
        self._pending: list[tuple[GenerateRequest, asyncio.Future]] = []
        self._wake = asyncio.Event()  # made anew in the server's loop at each start (_open)

    async def _open(self) -> list[web.RouteDef]:
        self._wake = asyncio.Event()
        asyncio.get_running_loop().create_task(self._work())
        return generate_routes(self._enqueue, failure_status=500, model=self.model, max_model_len=self.max_model_len)

    async def _enqueue(self, request: GenerateRequest) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._wake.set()
        return await future

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
