"""Shared fixtures: real uvicorn servers on 127.0.0.1, hosting the real app and models.

The servers run in one background thread with its own event loop, so the tests' own
loop plays Twilio against them over real sockets. Models load once per session.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import uvicorn
from starlette.applications import Starlette

from agents.cascade.agent import CascadeModels
from app.main import create_app
from app.services import Services, load_models
from app.settings import Settings

T = TypeVar("T")

AUTH_TOKEN = "test-auth-token-0123456789abcdef"
GREETING = (
    "Hello! Thanks for calling the offhook demo line. I can answer questions about "
    "almost anything. How can I help you today?"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """An event loop in a thread, hosting any number of uvicorn servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="servers", daemon=True)
        self._thread.start()
        self._servers: list[uvicorn.Server] = []
        self.stack = AsyncExitStack()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 300) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def serve(self, app: Starlette, port: int) -> str:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            ws_max_size=1 << 20,
            ws_ping_interval=None,
            lifespan="on",
        )
        server = uvicorn.Server(config)
        self._servers.append(server)

        async def start() -> None:
            self.loop.create_task(server.serve())
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
                await asyncio.sleep(0.02)

        self.run(start(), timeout=60)
        return f"http://127.0.0.1:{port}"

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.should_exit = True
            await asyncio.sleep(0.3)
            await self.stack.aclose()

        with contextlib.suppress(Exception):
            self.run(stop(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@dataclass
class Bot:
    url: str
    app: Starlette
    settings: Settings

    @property
    def services(self) -> Services:
        services: Services = self.app.state.services
        return services


def test_settings(**overrides: Any) -> Settings:
    defaults: dict[str, Any] = {"greeting": GREETING, "log_level": "INFO", "max_calls": 4}
    defaults.update(overrides)
    return Settings.from_env({}, **defaults)


@pytest.fixture(scope="session")
def servers() -> Iterator[ServerThread]:
    thread = ServerThread()
    yield thread
    thread.close()


@pytest.fixture(scope="session")
def models(servers: ServerThread) -> CascadeModels:
    settings = test_settings()
    return servers.run(load_models(settings, servers.stack), timeout=600)


def start_bot(servers: ServerThread, models: CascadeModels | None, **overrides: Any) -> Bot:
    port = free_port()
    settings = test_settings(public_url=f"http://127.0.0.1:{port}", **overrides)
    app = create_app(settings, models=models)
    url = servers.serve(app, port)
    return Bot(url=url, app=app, settings=settings)


@pytest.fixture(scope="session")
def bot(servers: ServerThread, models: CascadeModels) -> Bot:
    """The bot as deployed: signatures enforced, real models."""
    return start_bot(servers, models, twilio_auth_token=AUTH_TOKEN)
