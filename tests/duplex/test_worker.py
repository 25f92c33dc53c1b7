"""A real uvicorn worker on 127.0.0.1 with a scripted fake backend, driven over WebSockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
import numpy as np
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from agents.duplex.backend import UnitOutcome
from agents.duplex.client import WorkerSession, WorkerUnavailable
from agents.duplex.protocol import (
    Error,
    Keypad,
    Pause,
    Paused,
    Prepare,
    Prepared,
    Result,
    Resume,
    Resumed,
    Stop,
    Stopped,
    ToGateway,
    ToWorker,
    Unit,
    decode,
    encode,
    pcm16_bytes,
)
from agents.duplex.worker import create_worker_app
from tests.duplex.local_app import serve_locally

UNIT = np.zeros(1600, dtype=np.float32)  # 100 ms of silence: the fake ignores content


class FakeBackend:
    """Records every call; returns scripted outcomes; gates to hold a step open."""

    name = "fake"
    keypad_input = True

    def __init__(self, outcomes: list[UnitOutcome] | None = None) -> None:
        self.outcomes = list(outcomes or [])
        self.calls: list[str] = []
        self.speech: list[list[float] | None] = []  # the gateway's speech windows per unit
        self.load_gate: asyncio.Event | None = None
        self.finalize_gate: asyncio.Event | None = None
        self.fail_on_unit: int | None = None
        self.cleaned = asyncio.Event()
        self._units = 0

    async def load(self) -> None:
        if self.load_gate is not None:
            await self.load_gate.wait()
        self.calls.append("load")

    async def prepare(self, request: Prepare) -> None:
        self.calls.append(f"prepare:{request.system_prompt}")

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        self.calls.append(f"unit:{audio_16k.size}")
        self.speech.append(None if speech is None else list(speech))
        self._units += 1
        if self.fail_on_unit == self._units:
            raise RuntimeError("the model fell over")
        return self.outcomes.pop(0) if self.outcomes else UnitOutcome()

    async def keypad(self, digits: str) -> None:
        self.calls.append(f"keypad:{digits}")

    async def finalize_unit(self) -> None:
        if self.finalize_gate is not None:
            await self.finalize_gate.wait()
        self.calls.append("finalize")

    async def cleanup(self) -> None:
        self.calls.append("cleanup")
        self.cleaned.set()

    def memory_mb(self) -> float:
        return 12.5


class RaisedFromTheApp:
    """ASGI middleware keeping what the worker app let escape (uvicorn would log it as
    "Exception in ASGI application")."""

    def __init__(self, app: ASGIApp, raised: list[BaseException]) -> None:
        self.app = app
        self.raised = raised

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            self.raised.append(exc)
            raise


@asynccontextmanager
async def serve(
    backend: FakeBackend, raised: list[BaseException] | None = None, **options: float | str
) -> AsyncIterator[str]:
    """The worker app on a free port, in this test's event loop; yields host:port."""
    app = create_worker_app(backend, worker_id="w-test", **options)
    app.add_middleware(RaisedFromTheApp, raised=[] if raised is None else raised)
    async with serve_locally(app, lifespan="on") as url:
        yield url.removeprefix("ws://")


async def health(address: str) -> dict[str, object]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://{address}/health")
    response.raise_for_status()
    body: dict[str, object] = response.json()
    return body


async def wait_state(address: str, state: str) -> dict[str, object]:
    """Poll /health until the worker reports `state` (state changes have no event to await)."""
    async with asyncio.timeout(5):
        while True:
            body = await health(address)
            if body["state"] == state:
                return body
            await asyncio.sleep(0.01)


async def send(ws: ClientConnection, message: ToWorker) -> None:
    await ws.send(encode(message))


async def recv(ws: ClientConnection) -> ToGateway:
    async with asyncio.timeout(5):
        message = decode(await ws.recv())
    assert not isinstance(message, Prepare | Unit | Keypad | Pause | Resume | Stop)
    return message


def unit(seq: int) -> Unit:
    return Unit(seq=seq, audio=pcm16_bytes(UNIT))


async def start_session(address: str) -> ClientConnection:
    ws = await connect(f"ws://{address}/session")
    await send(ws, Prepare(system_prompt="be brief", unit_ms=100))
    prepared = await recv(ws)
    assert prepared == Prepared(worker_id="w-test", backend="fake", unit_ms=100, keypad=True)
    return ws


async def end_session(ws: ClientConnection, address: str) -> None:
    """Stop, read the Stopped, close, and see the worker back to IDLE."""
    await send(ws, Stop())
    assert isinstance(await recv(ws), Stopped)
    await ws.close()
    await wait_state(address, "idle")


async def test_the_gateways_speech_windows_reach_the_backend_with_their_unit() -> None:
    backend = FakeBackend([])
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, Unit(seq=0, audio=pcm16_bytes(np.zeros(1600)), speech=(0.1, 0.9)))
        await recv(ws)
        await send(ws, unit(1))
        await recv(ws)
        await send(ws, Stop())
        await recv(ws)
        await ws.close()

    assert backend.speech == [[0.1, 0.9], None]


async def test_prepare_units_stop_results_in_order() -> None:
    speech = np.full(800, 0.25, dtype=np.float32)
    backend = FakeBackend(
        [
            UnitOutcome(),
            UnitOutcome(action="speak", text="Hi.", audio=speech, sample_rate=22050),
            UnitOutcome(action="speak", text="Bye.", audio=speech, end_of_turn=True),
        ]
    )
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        assert (await health(address))["state"] == "duplex_active"
        results = []
        for seq in range(3):
            await send(ws, unit(seq))
            message = await recv(ws)
            assert isinstance(message, Result)
            results.append(message)
        await send(ws, Stop())
        assert await recv(ws) == Stopped("stop")
        await ws.close()
        body = await wait_state(address, "idle")

    assert [r.seq for r in results] == [0, 1, 2]
    assert [r.action for r in results] == ["listen", "speak", "speak"]
    assert results[1].text == "Hi." and results[1].sample_rate == 22050
    assert len(results[1].audio) == 2 * speech.size
    assert [r.end_of_turn for r in results] == [False, False, True]
    assert "unit" in results[0].timings
    assert backend.calls == [
        "load",
        "prepare:be brief",
        *["unit:1600", "finalize"] * 3,
        "cleanup",
    ]
    assert body["sessions_served"] == 1


async def test_finalize_runs_after_the_result_and_before_the_next_unit() -> None:
    backend = FakeBackend()
    backend.finalize_gate = asyncio.Event()
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, unit(0))
        first = await recv(ws)
        # The result arrived while finalize is still held open: finalize is deferred.
        assert isinstance(first, Result) and first.seq == 0
        assert backend.calls[-1] == "unit:1600"
        await send(ws, unit(1))
        await asyncio.sleep(0.05)  # give unit 1 time to reach the worker's barrier
        assert backend.calls.count("unit:1600") == 1
        backend.finalize_gate.set()
        second = await recv(ws)
        assert isinstance(second, Result) and second.seq == 1
        await end_session(ws, address)
    assert backend.calls[2:] == ["unit:1600", "finalize", "unit:1600", "finalize", "cleanup"]


async def test_keypad_presses_reach_the_backend_between_units_after_the_finalize() -> None:
    backend = FakeBackend()
    backend.finalize_gate = asyncio.Event()
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, unit(0))
        assert isinstance(await recv(ws), Result)
        await send(ws, Keypad("42#"))
        await send(ws, unit(1))
        await asyncio.sleep(0.05)
        assert "keypad:42#" not in backend.calls  # held at the barrier with unit 1
        backend.finalize_gate.set()
        assert isinstance(await recv(ws), Result)
        await end_session(ws, address)
    assert backend.calls[2:6] == ["unit:1600", "finalize", "keypad:42#", "unit:1600"]


async def test_a_speech_only_backend_refuses_keypad_input_and_the_session_goes_on() -> None:
    backend = FakeBackend()
    backend.keypad_input = False
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await connect(f"ws://{address}/session")
        await send(ws, Prepare(system_prompt="be brief", unit_ms=100))
        prepared = await recv(ws)
        assert isinstance(prepared, Prepared) and not prepared.keypad
        await send(ws, Keypad("1"))
        refused = await recv(ws)
        assert isinstance(refused, Error) and not refused.fatal
        assert "keypad" in refused.message
        await send(ws, unit(0))
        assert isinstance(await recv(ws), Result)
        await end_session(ws, address)
    assert not any(call.startswith("keypad") for call in backend.calls)


async def test_a_second_session_is_rejected_busy() -> None:
    backend = FakeBackend()
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        async with connect(f"ws://{address}/session") as second:
            with pytest.raises(ConnectionClosed) as closed:
                await second.recv()
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 1013
        assert closed.value.rcvd.reason == "busy"
        # The first session is untouched.
        await send(ws, unit(0))
        assert isinstance(await recv(ws), Result)
        await end_session(ws, address)


async def test_pause_resume_then_pause_timeout_releases_the_worker() -> None:
    backend = FakeBackend()
    async with serve(backend, session_timeout_s=0.2) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, Pause())
        assert await recv(ws) == Paused()
        assert (await health(address))["state"] == "duplex_paused"
        await send(ws, unit(0))  # units are not taken while paused
        refused = await recv(ws)
        assert isinstance(refused, Error) and not refused.fatal
        await send(ws, Resume())
        assert await recv(ws) == Resumed()
        await send(ws, Pause())
        assert await recv(ws) == Paused()
        assert await recv(ws) == Stopped("pause_timeout")
        with pytest.raises(ConnectionClosed):
            await recv(ws)
        await backend.cleaned.wait()
        body = await wait_state(address, "idle")
    assert body["sessions_served"] == 1
    assert backend.calls[-1] == "cleanup"


async def test_disconnect_mid_session_cleans_up() -> None:
    backend = FakeBackend()
    raised: list[BaseException] = []
    async with serve(backend, raised) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, unit(0))
        await recv(ws)
        ws.transport.abort()  # no close handshake: the gateway process died
        async with asyncio.timeout(5):
            await backend.cleaned.wait()
        await wait_state(address, "idle")
        # The worker takes the next call.
        ws = await start_session(address)
        await send(ws, Stop())
        await recv(ws)
        await ws.close()
    assert backend.calls.count("cleanup") == 2
    assert raised == [], "closing a connection the gateway dropped is no error"


async def test_backend_error_is_fatal_to_the_session_not_the_worker() -> None:
    backend = FakeBackend()
    backend.fail_on_unit = 2
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, unit(0))
        assert isinstance(await recv(ws), Result)
        await send(ws, unit(1))
        error = await recv(ws)
        assert isinstance(error, Error) and error.fatal
        assert "the model fell over" in error.message
        with pytest.raises(ConnectionClosed):
            await recv(ws)
        await backend.cleaned.wait()
        await wait_state(address, "idle")


async def test_protocol_violations_are_answered_and_ignored() -> None:
    backend = FakeBackend()
    async with serve(backend) as address:
        await wait_state(address, "idle")
        async with connect(f"ws://{address}/session") as ws:
            await send(ws, unit(0))  # before prepare
            early = await recv(ws)
            assert (
                isinstance(early, Error) and not early.fatal and "before prepare" in early.message
            )
            await ws.send(b"\x00\x01")
            binary = await recv(ws)
            assert isinstance(binary, Error) and not binary.fatal and "binary" in binary.message
            await ws.send('{"type": "nonsense"}')
            bad = await recv(ws)
            assert isinstance(bad, Error) and not bad.fatal and "nonsense" in bad.message
            await send(ws, Prepare(system_prompt="x", unit_ms=100))
            assert isinstance(await recv(ws), Prepared)
            await send(ws, Resume())  # not paused
            assert isinstance(await recv(ws), Error)
            await send(ws, unit(0))
            assert isinstance(await recv(ws), Result)
            await send(ws, Stop())
            assert await recv(ws) == Stopped("stop")
        await wait_state(address, "idle")


async def test_health_reports_loading_then_idle() -> None:
    backend = FakeBackend()
    backend.load_gate = asyncio.Event()
    async with serve(backend) as address:
        body = await health(address)
        assert body["state"] == "loading" and body["load_s"] is None
        async with connect(f"ws://{address}/session") as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        backend.load_gate.set()
        body = await wait_state(address, "idle")
    assert body["worker_id"] == "w-test"
    assert body["backend"] == "fake"
    assert isinstance(body["load_s"], float)
    assert body["sessions_served"] == 0
    assert body["memory_mb"] == 12.5
    assert isinstance(body["uptime_s"], float) and body["uptime_s"] >= 0


async def test_a_backend_that_fails_to_load_puts_the_worker_in_error() -> None:
    class Broken(FakeBackend):
        async def load(self) -> None:
            raise RuntimeError("no weights")

    async with serve(Broken()) as address:
        body = await wait_state(address, "error")
    assert body["error"] == "no weights"


async def test_a_failed_prepare_is_fatal_to_the_session() -> None:
    class Unprepared(FakeBackend):
        async def prepare(self, request: Prepare) -> None:
            raise RuntimeError("bad prompt")

    backend = Unprepared()
    async with serve(backend) as address:
        await wait_state(address, "idle")
        async with connect(f"ws://{address}/session") as ws:
            await send(ws, Prepare(system_prompt="x"))
            error = await recv(ws)
            assert isinstance(error, Error) and error.fatal and "bad prompt" in error.message
        await backend.cleaned.wait()
        body = await wait_state(address, "idle")
    assert body["sessions_served"] == 0


@pytest.mark.parametrize(
    "offered", [None, "Bearer wrong", "Bearer s3cre", "s3cret", "Bearer s3cret2"]
)
async def test_a_session_without_the_worker_token_is_refused_at_the_handshake(
    offered: str | None,
) -> None:
    backend = FakeBackend()
    async with serve(backend, token="s3cret") as address:
        await wait_state(address, "idle")
        headers = {"Authorization": offered} if offered is not None else None
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"ws://{address}/session", additional_headers=headers)
        assert refused.value.response.status_code == 403
        # Nothing was touched: the worker is still free for the gateway that knows.
        assert (await health(address))["state"] == "idle"
        assert backend.calls == ["load"]


async def test_the_gateway_presents_the_worker_token_and_is_served() -> None:
    backend = FakeBackend()
    async with serve(backend, token="s3cret") as address:
        await wait_state(address, "idle")
        refused = WorkerSession()
        with pytest.raises(WorkerUnavailable):
            await refused.connect(f"ws://{address}", Prepare(system_prompt="x", unit_ms=100))
        session = WorkerSession()
        prepared = await session.connect(
            f"ws://{address}", Prepare(system_prompt="x", unit_ms=100), token="s3cret"
        )
        assert prepared.worker_id == "w-test"
        await session.stop()


async def test_an_idle_session_is_released_by_its_timeout() -> None:
    """A gateway gone without closing, or a client sitting on the worker, frees it."""
    backend = FakeBackend()
    async with serve(backend, session_timeout_s=0.3) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, unit(0))
        assert isinstance(await recv(ws), Result)
        assert await recv(ws) == Stopped("idle_timeout")  # then nothing more was sent
        with pytest.raises(ConnectionClosed):
            await recv(ws)
        await backend.cleaned.wait()
        await wait_state(address, "idle")


async def test_a_connection_that_never_prepares_is_released_by_the_timeout() -> None:
    backend = FakeBackend()
    async with serve(backend, session_timeout_s=0.2) as address:
        await wait_state(address, "idle")
        ws = await connect(f"ws://{address}/session")
        assert (await health(address))["state"] == "duplex_active"
        assert await recv(ws) == Stopped("idle_timeout")
        await wait_state(address, "idle")


async def test_a_backend_result_out_of_range_is_not_sent_but_fatal() -> None:
    backend = FakeBackend([UnitOutcome(action="speak", audio=UNIT + 0.1, sample_rate=12345)])
    async with serve(backend) as address:
        await wait_state(address, "idle")
        ws = await start_session(address)
        await send(ws, unit(0))
        error = await recv(ws)
        assert isinstance(error, Error) and error.fatal and "invalid" in error.message
        await backend.cleaned.wait()
        await wait_state(address, "idle")
