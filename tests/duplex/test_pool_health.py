"""The default health check: GET http://host:port/health of a ws:// worker url."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from agents.duplex.pool import PoolWorkerState, WorkerPool, http_health
from tests.duplex.local_app import serve_locally


@asynccontextmanager
async def fake_health(status: int) -> AsyncIterator[str]:
    """A worker whose /health answers with `status`; yields its ws:// url."""

    async def health(request: Request) -> Response:
        if status != 200:
            return PlainTextResponse("down", status_code=status)
        return JSONResponse({"state": "idle", "backend": "minicpmo"})

    app = Starlette(routes=[Route("/health", health)])
    async with serve_locally(app) as url:
        yield url


async def test_http_health_returns_the_json() -> None:
    async with fake_health(200) as url:
        assert await http_health(url) == {"state": "idle", "backend": "minicpmo"}


async def test_http_health_is_none_on_error_status() -> None:
    async with fake_health(503) as url:
        assert await http_health(url) is None


async def test_http_health_is_none_when_nothing_listens() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    assert await http_health(f"ws://127.0.0.1:{port}") is None


async def test_pool_uses_http_health_by_default() -> None:
    async with fake_health(200) as url:
        pool = WorkerPool([url])
        await pool.check_health()
        assert pool.workers[0].state is PoolWorkerState.IDLE
        assert pool.workers[0].backend == "minicpmo"
