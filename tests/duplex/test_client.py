"""WorkerSession against a tiny fake worker: starlette + uvicorn on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import numpy as np
import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from agents.duplex.client import (
    SessionState,
    WorkerDied,
    WorkerSession,
    WorkerStalled,
    WorkerUnavailable,
)
from agents.duplex.protocol import (
    Error,
    Prepare,
    Prepared,
    Result,
    Stop,
    Stopped,
    Unit,
    decode,
    encode,
)
from tests.duplex.local_app import serve_locally

Handler = Callable[[WebSocket], Awaitable[None]]
PREPARE = Prepare(system_prompt="You are a test.")


@asynccontextmanager
async def fake_worker(handler: Handler) -> AsyncIterator[str]:
    """Serve `handler` at /session on a free port; yields the worker's ws:// url."""

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        await handler(ws)

    app = Starlette(routes=[WebSocketRoute("/session", endpoint)])
    async with serve_locally(app) as url:
        yield url


async def connected(url: str) -> WorkerSession:
    """A session past its Prepared, as the gateway holds one."""
    session = WorkerSession()
    await session.connect(url, PREPARE)
    return session


async def prepared(ws: WebSocket) -> None:
    """Answer the Prepare like a real worker."""
    assert isinstance(decode(await ws.receive_text()), Prepare)
    await ws.send_text(encode(Prepared(worker_id="w0", backend="fake", unit_ms=1000)))


async def echo_units(ws: WebSocket) -> None:
    """Prepared, then one Result per Unit (listen), and Stopped on Stop."""
    await prepared(ws)
    while True:
        message = decode(await ws.receive_text())
        if isinstance(message, Unit):
            await ws.send_text(encode(Result(seq=message.seq, action="listen")))
        elif isinstance(message, Stop):
            await ws.send_text(encode(Stopped()))
            await ws.close()
            return


async def test_connect_returns_prepared() -> None:
    async with fake_worker(echo_units) as url:
        session = WorkerSession()
        reply = await session.connect(url, PREPARE)
        assert reply == Prepared(worker_id="w0", backend="fake", unit_ms=1000)
        assert session.state is SessionState.ACTIVE
        await session.stop()


async def test_results_arrive_in_order() -> None:
    async with fake_worker(echo_units) as url:
        session = await connected(url)
        for seq in range(3):
            await session.send_unit(seq, np.zeros(16000, np.float32))
        seqs = [(await session.next_result(timeout_s=2)).seq for _ in range(3)]
        assert seqs == [0, 1, 2]
        await session.stop()
        assert session.state is SessionState.CLOSED


async def test_unit_audio_reaches_worker_as_pcm16() -> None:
    received: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def capture(ws: WebSocket) -> None:
        await prepared(ws)
        message = decode(await ws.receive_text())
        assert isinstance(message, Unit)
        received.set_result(message.audio)
        await ws.receive_text()

    async with fake_worker(capture) as url:
        session = await connected(url)
        await session.send_unit(0, np.full(4, 0.5, np.float32))
        assert await received == np.full(4, 16384, "<i2").tobytes()
        await session.stop(timeout_s=0.05)


async def test_silent_worker_stalls() -> None:
    async def silent(ws: WebSocket) -> None:
        await prepared(ws)
        await ws.receive_text()  # the unit, never answered
        await ws.receive_text()

    async with fake_worker(silent) as url:
        session = await connected(url)
        await session.send_unit(0, np.zeros(160, np.float32))
        with pytest.raises(WorkerStalled):
            await session.next_result(timeout_s=0.05)
        await session.stop(timeout_s=0.05)


async def test_socket_closed_by_worker_is_worker_died() -> None:
    async def crash(ws: WebSocket) -> None:
        await prepared(ws)
        await ws.close(code=1011)

    async with fake_worker(crash) as url:
        session = await connected(url)
        with pytest.raises(WorkerDied) as info:
            await session.next_result(timeout_s=2)
        assert info.value.__cause__ is not None
        assert session.state is SessionState.CLOSED


async def test_fatal_error_is_worker_died() -> None:
    async def fatal(ws: WebSocket) -> None:
        await prepared(ws)
        await ws.send_text(encode(Error(message="CUDA out of memory", fatal=True)))
        await ws.receive_text()

    async with fake_worker(fatal) as url:
        session = await connected(url)
        with pytest.raises(WorkerDied, match="CUDA out of memory"):
            await session.next_result(timeout_s=2)


async def test_non_fatal_error_is_skipped() -> None:
    async def hiccup(ws: WebSocket) -> None:
        await prepared(ws)
        await ws.send_text(encode(Error(message="slow", fatal=False)))
        await ws.send_text(encode(Result(seq=7, action="speak", text="hi")))
        await ws.receive_text()

    async with fake_worker(hiccup) as url:
        session = await connected(url)
        assert (await session.next_result(timeout_s=2)).seq == 7
        await session.stop(timeout_s=0.05)


async def test_garbage_frame_is_worker_died() -> None:
    async def garbage(ws: WebSocket) -> None:
        await prepared(ws)
        await ws.send_text("not json")
        await ws.receive_text()

    async with fake_worker(garbage) as url:
        session = await connected(url)
        with pytest.raises(WorkerDied, match="protocol"):
            await session.next_result(timeout_s=2)


async def test_stop_on_dead_socket_does_not_raise() -> None:
    async def crash(ws: WebSocket) -> None:
        await prepared(ws)
        await ws.close(code=1011)

    async with fake_worker(crash) as url:
        session = await connected(url)
        with pytest.raises(WorkerDied):
            await session.next_result(timeout_s=2)
        await session.stop()
        await session.stop()


async def test_stop_waits_for_stopped() -> None:
    async with fake_worker(echo_units) as url:
        session = await connected(url)
        await session.send_unit(0, np.zeros(160, np.float32))  # its result is drained
        await session.stop(timeout_s=2)
        assert session.state is SessionState.CLOSED


async def test_send_after_close_is_worker_died() -> None:
    async with fake_worker(echo_units) as url:
        session = await connected(url)
        await session.stop()
        with pytest.raises(WorkerDied):
            await session.send_unit(1, np.zeros(160, np.float32))


async def test_refused_connection_is_unavailable() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(WorkerUnavailable):
        await WorkerSession().connect(f"ws://127.0.0.1:{port}", PREPARE)


async def test_worker_that_never_prepares_is_unavailable() -> None:
    async def mute(ws: WebSocket) -> None:
        await ws.receive_text()
        await ws.receive_text()

    async with fake_worker(mute) as url:
        session = WorkerSession()
        with pytest.raises(WorkerUnavailable):
            await session.connect(url, PREPARE, connect_timeout_s=0.05)
        assert session.state is SessionState.CLOSED


async def test_worker_refusing_prepare_is_unavailable() -> None:
    async def refuse(ws: WebSocket) -> None:
        await ws.receive_text()
        await ws.send_text(encode(Error(message="model not loaded", fatal=True)))
        await ws.receive_text()

    async with fake_worker(refuse) as url:
        with pytest.raises(WorkerUnavailable, match="model not loaded"):
            await WorkerSession().connect(url, PREPARE)


@pytest.mark.parametrize(
    "frame",
    [
        '{"type":"result","seq":1,"action":"shout"}',
        '{"type":"result","seq":1,"action":"speak","sample_rate":12345}',
        '{"type":"result","seq":1,"action":"speak","audio":"AA=="}',
        '{"type":"result","seq":1,"action":"speak","text":42}',
        '{"type":"result","seq":-1,"action":"listen"}',
        '{"type":"result","seq":1,"action":"listen","timings":{"unit":"slow"}}',
        '{"type":"prepare","system_prompt":"turned around"}',
    ],
)
async def test_a_malformed_or_out_of_range_result_is_worker_died(frame: str) -> None:
    async def malformed(ws: WebSocket) -> None:
        await prepared(ws)
        await ws.receive_text()
        await ws.send_text(frame)
        await ws.receive_text()

    async with fake_worker(malformed) as url:
        session = await connected(url)
        await session.send_unit(1, np.zeros(16000, dtype=np.float32))
        with pytest.raises(WorkerDied):
            await session.next_result(timeout_s=2)
        assert session.state is SessionState.CLOSED
