"""The token endpoint for a local model: ``hosts.token_endpoint``'s routes, the waiting requests
answered as one batch by the injected ``generate`` on a worker thread (never on the server's
event loop, which runs on a thread of its own). A generator that raises answers each request
of its batch with HTTP 500; one that puts an exception in place of a ``Generation`` fails only
that request.

A batch is cut when every episode in flight has its next request waiting (``episodes(n)``, then
``episode_done()`` as each ends), so a step's turns reach the model together however long each
one's env work took; ``max_wait`` bounds the wait. With no episodes declared (another client) a
batch is whatever is waiting when the generator is free.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from aiohttp import web

from verifiers_stepwise.hosts.token_endpoint import GenerateRequest, Generation, generate_routes
from verifiers_stepwise.loopback import ThreadedServer

__all__ = ["BatchingTokenEndpoint", "GenerateFn"]

GenerateFn = Callable[[Sequence[GenerateRequest]], Sequence[Generation | Exception]]
"""Answers a batch of requests, one ``Generation`` (or the exception that failed it) each, in order."""


class BatchingTokenEndpoint(ThreadedServer):
    """Serves ``generate`` on ``http://127.0.0.1:<port>`` from its own thread; a context manager.
    ``base_url`` (``…/v1``) is what ``vf.TrainClientConfig(base_url=...)`` takes."""

    what = "token endpoint"

    def __init__(self, generate: GenerateFn, *, max_wait: float = 2.0) -> None:
        super().__init__()
        self.generate = generate
        self.max_wait = max_wait
        self.in_flight = 0
        """Episodes declared and not yet done (changed only in the server's loop)."""
        self._pending: list[tuple[GenerateRequest, asyncio.Future]] = []
        self._wake = asyncio.Event()  # made anew in the server's loop at each start (_open)

    async def _open(self) -> list[web.RouteDef]:
        self._wake = asyncio.Event()
        asyncio.get_running_loop().create_task(self._work())
        return generate_routes(self._enqueue, failure_status=500)

    def episodes(self, n: int) -> None:
        """Declare ``n`` more episodes in flight (thread-safe)."""
        if self._loop is None:
            raise RuntimeError("the token endpoint is not running (start() it first)")
        self._loop.call_soon_threadsafe(self._add, n)

    def episode_done(self) -> None:
        """One declared episode ended: it sends no more requests (thread-safe)."""
        self.episodes(-1)

    def _add(self, n: int) -> None:
        self.in_flight = max(0, self.in_flight + n)
        self._wake.set()

    async def _enqueue(self, request: GenerateRequest) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._wake.set()
        return await future

    async def _work(self) -> None:
        """Hand every waiting request to the generator at once, one batch at a time."""
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                continue
            deadline = loop.time() + self.max_wait
            while len(self._pending) < self.in_flight and (left := deadline - loop.time()) > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), left)
                self._wake.clear()
            batch, self._pending = self._pending, []
            self._wake.clear()
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
