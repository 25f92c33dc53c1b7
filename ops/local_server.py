"""Run the real app on 127.0.0.1 in a background thread: for benchmarks and tests.

One event loop in one thread hosts any number of uvicorn servers, so a caller on the
main thread's loop talks to them over real sockets, exactly as Twilio would.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import uvicorn
from starlette.applications import Starlette

from agents.cascade.llm_server import free_local_port as free_port
from app.http_guard import server_options
from app.settings import Settings

__all__ = ["ServerThread", "free_port"]  # free_port: one place picks free ports

T = TypeVar("T")


class ServerThread:
    """An event loop in a thread, hosting uvicorn servers; `stack` closes shared resources."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="servers", daemon=True)
        self._thread.start()
        self._servers: list[uvicorn.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.stack = AsyncExitStack()

    @property
    def servers(self) -> list[uvicorn.Server]:
        """Every server started here, oldest first (tests stop one to simulate a crash)."""
        return list(self._servers)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def serve(self, app: Starlette, port: int) -> str:
        # The options `offhook serve` runs with, from the app's settings where it has some.
        services = getattr(app.state, "services", None)
        settings = services.settings if services is not None else Settings.from_env({})
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
            **server_options(
                head_timeout_s=settings.http_head_timeout_s,
                max_connections=settings.connection_limit,
            ),
        )
        server = uvicorn.Server(config)
        self._servers.append(server)

        async def start() -> None:
            self._tasks.append(self.loop.create_task(server.serve()))
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
                await asyncio.sleep(0.02)

        self.run(start(), timeout=60)
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.should_exit = True
            # Let each server finish its lifespan shutdown (model servers, clients).
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=20)
            await self.stack.aclose()

        with contextlib.suppress(Exception):
            self.run(stop(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()
