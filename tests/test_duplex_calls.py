"""Calls served by the duplex worker pool, end to end, with the cascade as the safety net.

Two real `cascade` workers (the worker app over the real models) run beside the bot on
127.0.0.1; the caller is the Twilio-protocol simulator.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from agents.cascade.agent import CascadeModels
from agents.duplex.cascade_backend import CascadeDuplexBackend
from agents.duplex.protocol import Prepared, decode, encode
from agents.duplex.worker import create_worker_app
from callevents import Fallback, parse_timeline
from media.vad import SileroVad
from ops.local_server import ServerThread, free_port
from ops.simulate import CallerTurn, SimulationConfig, simulate_call
from recordings.store import RecordStore
from tests.conftest import AUTH_TOKEN, INTERRUPTION, Bot, finished_record, start_bot

pytestmark = pytest.mark.timeout(240)


def start_worker(
    servers: ServerThread, models: CascadeModels, name: str
) -> tuple[str, uvicorn.Server]:
    backend = CascadeDuplexBackend.from_models(models, vad_factory=SileroVad)
    port = free_port()
    servers.serve(create_worker_app(backend, worker_id=name), port)
    server = servers.servers[-1]
    return f"ws://127.0.0.1:{port}", server


@pytest.fixture(scope="module")
def duplex_bot(servers: ServerThread, models: CascadeModels) -> tuple[Bot, list[uvicorn.Server]]:
    first, one = start_worker(servers, models, "w1")
    second, two = start_worker(servers, models, "w2")
    bot = start_bot(
        servers, models, twilio_auth_token=AUTH_TOKEN, duplex_workers=f"{first},{second}"
    )

    async def healthy() -> None:
        pool = bot.services.pool
        assert pool is not None
        for _ in range(100):
            await pool.check_health()
            if pool.snapshot()["idle"] == 2:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"workers not healthy: {pool.snapshot()}")

    servers.run(healthy(), timeout=30)
    return bot, [one, two]


async def test_a_call_is_served_by_a_duplex_worker_and_answered(
    duplex_bot: tuple[Bot, list[uvicorn.Server]],
) -> None:
    bot, _workers = duplex_bot
    report = await simulate_call(
        SimulationConfig(
            base_url=bot.url,
            auth_token=AUTH_TOKEN,
            turns=[CallerTurn(text="What is the capital of France?", after="bot_done")],
            hangup_after_ms=4000,
        )
    )
    assert report.protocol_violations == []
    assert report.greeting_start_ms is not None
    assert report.turns[0].latency_ms is not None, "the duplex worker never answered"
    await asyncio.sleep(0.5)
    meta = RecordStore(bot.settings.calls_dir).open(report.call_sid).meta
    assert meta["agent"] == "duplex" and meta["fallbacks"] == []
    metrics = bot.services.metrics.render().decode()
    assert "offhook_pool_unit_seconds_count" in metrics


async def test_a_worker_killed_mid_call_hands_the_call_to_the_cascade(
    servers: ServerThread, models: CascadeModels
) -> None:
    only, worker = start_worker(servers, models, "doomed")
    bot = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, duplex_workers=only)

    async def kill_when_leased() -> None:
        pool = bot.services.pool
        assert pool is not None
        for _ in range(200):
            await pool.check_health()
            if pool.snapshot()["busy"] == 1:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # mid-greeting
        worker.should_exit = True  # the worker process goes away

    killer = asyncio.get_running_loop().run_in_executor(None, servers.run, kill_when_leased())
    report = await simulate_call(
        SimulationConfig(
            base_url=bot.url,
            auth_token=AUTH_TOKEN,
            turns=[CallerTurn(text="Can you recommend a good book to read?", after="bot_done")],
            hangup_after_ms=4000,
        )
    )
    await killer
    assert report.protocol_violations == []
    assert report.turns[0].latency_ms is not None, "nobody answered after the worker died"
    await asyncio.sleep(0.5)
    meta = (await finished_record(bot, report.call_sid)).meta
    assert meta["agent"] == "duplex" and meta["fallbacks"] == ["cascade"]
    timeline = parse_timeline(RecordStore(bot.settings.calls_dir).open(report.call_sid).timeline())
    assert any(isinstance(e, Fallback) and e.target == "cascade" for _, e in timeline)


def start_malformed_worker(servers: ServerThread, bad_result: str) -> str:
    """A worker that says idle, prepares, and answers its first unit with `bad_result`."""

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"state": "idle", "backend": "malformed"})

    async def session(ws: WebSocket) -> None:
        await ws.accept()
        decode(await ws.receive_text())
        await ws.send_text(encode(Prepared(worker_id="bad", backend="malformed", unit_ms=1000)))
        with contextlib.suppress(WebSocketDisconnect):
            decode(await ws.receive_text())
            await ws.send_text(bad_result)
            while True:
                await ws.receive_text()

    app = Starlette(routes=[Route("/health", health), WebSocketRoute("/session", session)])
    port = free_port()
    servers.serve(app, port)
    return f"ws://127.0.0.1:{port}"


@pytest.mark.parametrize(
    "bad_result",
    [
        '{"type":"result","seq":1,"action":"speak","audio":"AAAA","sample_rate":12345}',
        '{"type":"result","seq":99,"action":"listen"}',  # a unit that was never sent
    ],
)
async def test_a_worker_answering_out_of_range_hands_the_call_to_the_cascade(
    servers: ServerThread, models: CascadeModels, bad_result: str
) -> None:
    url = start_malformed_worker(servers, bad_result)
    bot = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, duplex_workers=url)
    report = await simulate_call(
        SimulationConfig(
            base_url=bot.url,
            auth_token=AUTH_TOKEN,
            turns=[CallerTurn(text="What is the capital of France?", after="bot_done")],
            hangup_after_ms=4000,
        )
    )
    assert report.protocol_violations == []
    assert report.turns[0].latency_ms is not None, "nobody answered after the bad result"
    record = await finished_record(bot, report.call_sid)
    assert record.meta["agent"] == "duplex" and record.meta["fallbacks"] == ["cascade"]
    timeline = parse_timeline(record.timeline())
    reasons = [e.reason for _, e in timeline if isinstance(e, Fallback)]
    assert reasons == ["worker_died"]


async def test_on_a_duplex_call_an_interruption_stops_the_bot_as_fast_as_the_cascade(
    duplex_bot: tuple[Bot, list[uvicorn.Server]],
) -> None:
    # The worker hears the caller a 1 s unit at a time; the gateway hears every frame
    # and holds the bot itself at the caller's first loud words.
    bot, _workers = duplex_bot
    report = await simulate_call(
        SimulationConfig(
            base_url=bot.url, auth_token=AUTH_TOKEN, turns=[INTERRUPTION], hangup_after_ms=3000
        )
    )
    onset = report.turns[0].speech_start_ms
    assert report.clears, "no clear was sent when the caller barged in"
    heard_until = max(end for start, end in report.bot_utterances if start < onset)
    # The same allowance as the in-process cascade's test (target 250 ms p50).
    assert heard_until - onset < 600, f"the bot played on {heard_until - onset:.0f} ms"
    record = await finished_record(bot, report.call_sid)
    names = [event.name for _, event in parse_timeline(record.timeline())]
    assert "hold" in names and "barge_in" in names
    assert record.meta["agent"] == "duplex"
