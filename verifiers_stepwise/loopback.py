"""Serving aiohttp routes on 127.0.0.1, in the running event loop or from a thread of its own.

    runner, port = await serve(routes)      # in this loop; ``await runner.cleanup()`` stops it
    class MyServer(ThreadedServer): ...     # its own thread and loop: start()/stop(), a context manager

The port is the one asked for, or with 0 one the OS picks. Bodies up to 1 GiB are read (a long
context arrives as one JSON body); nothing is access-logged (a training run makes thousands of
requests); a stop gives requests in flight 0.5 s to finish. Used by the hosts' token endpoints
and by ``testing.server``; imports only aiohttp (a core dependency).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import Self

from aiohttp import web

__all__ = ["ThreadedServer", "serve"]


async def serve(routes: Iterable[web.AbstractRouteDef], port: int = 0) -> tuple[web.AppRunner, int]:
    """Listen on ``127.0.0.1:port`` in the running loop; the runner (to clean up) and the port served."""
    app = web.Application(client_max_size=1 << 30)
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, runner.addresses[0][1]


class ThreadedServer:
    """Serves ``_open()``'s routes from a thread and event loop of its own.

    ``_open`` runs in that loop before it listens, so whatever belongs to the loop (events,
    tasks) is made there, anew at each start. Tasks still pending when the server has stopped
    are cancelled."""

    what = "server"
    """Names the thread and the start-up errors."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        """The port asked for (0: one the OS picks); after ``start()``, the port served."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def _open(self) -> Iterable[web.AbstractRouteDef]:
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()
        self._error = None
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(loop, ready), name=self.what.replace(" ", "-"), daemon=True
        )
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError(f"{self.what} did not start within 30 s")
        if self._error is not None:
            self._thread = None
            raise RuntimeError(f"{self.what} failed to start on port {self.port}: {self._error}") from self._error
        self._loop = loop
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        loop, self._loop = self._loop, None
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(30)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        try:
            runner, self.port = loop.run_until_complete(self._listen())
        except BaseException as error:  # reported to start()
            self._error = error
            ready.set()
            _close(loop)
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(runner.cleanup())
            _close(loop)

    async def _listen(self) -> tuple[web.AppRunner, int]:
        return await serve(await self._open(), self.port)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the loop's pending tasks, let them end, and close it."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()
