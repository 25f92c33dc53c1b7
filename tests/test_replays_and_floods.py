"""What a stranger with one captured webhook can still do, and what it cannot.

Each attack runs against a real signed server on 127.0.0.1, with a live call (or a
genuine caller) beside it, which must be answered normally while nothing it records is
lost: replayed webhooks, a second stream for a live call, a flood of foreign mark
echoes, half-open request heads and a crowd of idle connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
import websockets

from agents.cascade.agent import CascadeModels
from app.admission import HOLD_S
from ops.simulate import SimulationConfig, simulate_call
from tests.conftest import AUTH_TOKEN, Bot, ServerThread, start_bot
from tests.test_open_internet import (
    alive,
    new_sid,
    post_signed,
    record_of,
    rejected,
    start_stream,
    until_idle,
    webhook_params,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def streams(twiml: str) -> bool:
    return "<Stream" in twiml


async def genuine_call(bot: Bot) -> bool:
    """A real caller dials in; True if they were connected (heard the greeting)."""
    # They hang up 1.5 s into the call: time for the greeting to start on a busy box.
    report = await simulate_call(
        SimulationConfig(base_url=bot.url, auth_token=AUTH_TOKEN, hangup_after_ms=1500)
    )
    return report.greeting_start_ms is not None and report.protocol_violations == []


async def test_replayed_webhooks_never_lock_a_genuine_caller_out(
    servers: ServerThread, models: CascadeModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reservations wait 3 s for their stream here (15 s in service), to lapse in the test.
    monkeypatch.setattr("app.services.RESERVE_S", 3.0)
    bot = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, max_calls=4)
    # Four signed webhooks a stranger captured (a proxy log), of calls whose streams never
    # reached us: the first delivery reserves, as a real one would.
    captured = [webhook_params() for _ in range(4)]
    for params in captured:
        assert streams((await post_signed(bot, params)).text)

    async def replay_forever() -> None:
        while True:
            for params in captured:
                await post_signed(bot, params)
            await asyncio.sleep(1.0)

    # The one thing they could do: fresh reservations hold their slots for HOLD_S (a
    # stream is due within it), here all four. Once per CallSid, never again.
    assert not streams((await post_signed(bot, webhook_params())).text)
    replaying = asyncio.create_task(replay_forever())
    try:
        await asyncio.sleep(HOLD_S)
        connected = []
        for _ in range(5):
            connected.append(await genuine_call(bot))
            await asyncio.sleep(1.0)
    finally:
        replaying.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await replaying
    assert connected == [True] * 5
    # Lapsed, a captured webhook is never reserved again: no slot, no token.
    for params in captured:
        twiml = (await post_signed(bot, params)).text
        assert not streams(twiml), "a lapsed CallSid got a slot and a token again"
    assert rejected(bot, "replayed_webhook") >= 4 * 5
    await until_idle(bot)


async def test_a_replayed_webhook_opens_no_second_stream_for_a_live_call(bot: Bot) -> None:
    call_sid = new_sid()
    params = webhook_params(call_sid)
    assert streams((await post_signed(bot, params)).text)
    first, twilio = await start_stream(bot, call_sid)
    async with first:
        assert await alive(first, twilio)
        session = bot.services.calls[call_sid]
        # The webhook replayed, as after the 60 s token window: no token is minted.
        before = rejected(bot, "replayed_webhook")
        assert not streams((await post_signed(bot, params)).text)
        assert rejected(bot, "replayed_webhook") == before + 1
        # A fresh token (as if minted after the window) still opens no second stream.
        second, _ = await start_stream(bot, call_sid, token=bot.services.tokens.issue(call_sid))
        async with second:
            with contextlib.suppress(websockets.ConnectionClosed):
                await second.recv()
            assert second.close_code == 1008
        assert bot.services.active_calls == 1
        assert bot.services.calls[call_sid] is session, "the live call lost its place"
        assert await alive(first, twilio)
        await first.send(twilio.stop())
    record = await record_of(bot, call_sid)
    assert record.meta["ended_at"]
    # Ended, it is remembered: a replay now gets neither slot nor stream.
    assert not streams((await post_signed(bot, params)).text)
    late, _ = await start_stream(bot, call_sid, token=bot.services.tokens.issue(call_sid))
    async with late:
        with contextlib.suppress(websockets.ConnectionClosed):
            await late.recv()
        assert late.close_code == 1008


def record_bytes(path: Path) -> int:
    return sum(item.stat().st_size for item in path.iterdir())


async def test_a_flood_of_foreign_mark_echoes_is_counted_not_recorded(bot: Bot) -> None:
    call_sid = new_sid()
    ws, twilio = await start_stream(bot, call_sid)
    name = "x" * 63_000
    sent = 0
    async with ws:
        assert await alive(ws, twilio)
        began = time.monotonic()
        frame = 5
        while time.monotonic() - began < 3.0:
            for _ in range(20):
                await ws.send(twilio.mark(name))
                sent += 1
            await ws.send(twilio.media(b"\xff" * 160, frame * 20))
            frame += 1
            await asyncio.sleep(0.02)
        assert await alive(ws, twilio), "the flooded call stopped answering"
        await ws.send(twilio.stop())
    record = await record_of(bot, call_sid)
    assert sent > 1000
    assert record_bytes(record.path) < 5_000_000
    assert name not in (record.path / "timeline.jsonl").read_text()
    value = bot.services.metrics.registry.get_sample_value(
        "offhook_protocol_errors_total", {"kind": "bad_value"}
    )
    assert value is not None and value >= sent


async def half_open(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that sends half a request head, and then nothing."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /twilio/voice HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www")
    await writer.drain()
    return reader, writer


async def test_half_open_request_heads_are_closed_beside_a_live_call(
    servers: ServerThread, models: CascadeModels
) -> None:
    bot = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, http_head_timeout_s=2.0)
    port = int(bot.url.rsplit(":", 1)[1])
    connections = [await half_open(port) for _ in range(50)]
    call = asyncio.create_task(genuine_call(bot))
    began = time.monotonic()

    async def closed(reader: asyncio.StreamReader) -> bool:
        try:
            async with asyncio.timeout(35 - (time.monotonic() - began)):
                return await reader.read() == b""  # EOF: the server closed it
        except (TimeoutError, ConnectionError):
            return False

    results = await asyncio.gather(*(closed(reader) for reader, _ in connections))
    for _, writer in connections:
        writer.close()
    assert sum(results) >= 45, f"{sum(results)} of 50 closed"
    assert time.monotonic() - began < 10
    assert await call, "the genuine call was not answered during the attack"


async def test_idle_connections_give_way_to_a_genuine_call_at_the_cap(
    servers: ServerThread, models: CascadeModels
) -> None:
    # A stranger fills every connection the server allows with half-open heads, and
    # keeps them coming: the oldest of them gives way, never Twilio's webhook or stream.
    bot = start_bot(
        servers, models, twilio_auth_token=AUTH_TOKEN, max_connections=20, http_head_timeout_s=30
    )
    port = int(bot.url.rsplit(":", 1)[1])
    held = [await half_open(port) for _ in range(20)]
    try:
        newcomer = await half_open(port)
        held.append(newcomer)
        async with asyncio.timeout(5):
            with contextlib.suppress(ConnectionError):
                assert await held[0][0].read() == b"", "the oldest idle one was not closed"
        assert not newcomer[0].at_eof()
        assert await genuine_call(bot), "a genuine call found no room beside idle sockets"
    finally:
        for _, writer in held:
            writer.close()


@pytest.mark.timeout(240)
def test_a_flood_of_forged_requests_writes_a_few_log_lines_not_one_each(tmp_path: Path) -> None:
    # `offhook serve` as deployed (uvicorn's access log on): forged webhooks, forged
    # stream handshakes and garbage on the socket, 600 in all, a few lines in the log.
    import os
    import socket
    import subprocess
    import sys

    import httpx

    from ops.local_server import free_port

    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "PUBLIC_URL": f"http://127.0.0.1:{port}",
        "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "DATA_DIR": str(tmp_path / "data"),
        "LLM_EMBEDDED_SERVERS": "1",
        "LOG_LEVEL": "INFO",
    }
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve"], env=env, stdout=log, stderr=log
        )
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/livez", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            before = len(log_path.read_text().splitlines())
            with httpx.Client() as client:
                for _ in range(300):
                    forged = client.post(
                        f"http://127.0.0.1:{port}/twilio/voice",
                        data={"CallSid": "CA" + "1" * 32},
                        headers={"X-Twilio-Signature": "forged"},
                    )
                    assert forged.status_code == 403
                for n in range(200):
                    handshake = client.get(
                        f'http://127.0.0.1:{port}/twilio/media?n={n}"x',
                        headers={
                            "Connection": "Upgrade",
                            "Upgrade": "websocket",
                            "Sec-WebSocket-Version": "13",
                            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                            "X-Twilio-Signature": "forged",
                        },
                    )
                    assert handshake.status_code == 403
            for _ in range(100):
                with socket.create_connection(("127.0.0.1", port)) as raw:
                    raw.sendall(b"\x00\x01garbage\r\n\r\n")
                    raw.recv(1024)
            assert httpx.get(f"http://127.0.0.1:{port}/livez", timeout=5).status_code == 200
        finally:
            serve.terminate()
            serve.wait(60)
    written = log_path.read_text().splitlines()[before:]
    assert "Logging error" not in "\n".join(written) and "Traceback" not in "\n".join(written)
    about_the_flood = [
        line
        for line in written
        if " 403" in line or "WebSocket" in line or "Invalid HTTP" in line or "refus" in line
    ]
    assert len(about_the_flood) <= 20, "\n".join(about_the_flood[:40])
