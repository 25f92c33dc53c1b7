"""Serve a tiny Starlette app on 127.0.0.1 inside the test's own event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from starlette.applications import Starlette


@asynccontextmanager
async def serve_locally(app: Starlette, *, lifespan: str = "off") -> AsyncIterator[str]:
    """Yields the app's ws:// base url; the server stops when the block ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections queue in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, ws="websockets-sansio", lifespan=lifespan, log_level="critical", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
