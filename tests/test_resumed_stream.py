"""A stream that resumes a call (its gateway died; Twilio followed the <Redirect>) is the
same call carrying on: the caller, just told "sorry, we were cut off" by the TwiML, is
not greeted again, and the stream gets a record of its own, even on the gateway that
wrote the call's first one."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from ops.local_server import ServerThread
from recordings.store import RecordStore
from telephony.protocol import TwilioEventWriter
from tests.conftest import Bot
from tests.test_cluster_admission import gateway
from tests.test_open_internet import ACCOUNT_SID, close_code, new_sid, open_stream, until_idle

pytestmark = pytest.mark.timeout(120)


async def _stream(
    bot: Bot, call_sid: str, resume: int
) -> tuple[websockets.ClientConnection, TwilioEventWriter]:
    key = call_sid if resume == 0 else f"{call_sid}:resume:{resume}"
    twilio = TwilioEventWriter(new_sid("MZ"), call_sid, ACCOUNT_SID)
    ws = await open_stream(bot)
    await ws.send(twilio.connected())
    parameters = {"token": bot.services.tokens.issue(key), "from": "+15551234567"}
    if resume:
        parameters["resume"] = str(resume)
    await ws.send(twilio.start(parameters))
    return ws, twilio


async def _bot_audio_within(
    ws: websockets.ClientConnection, twilio: TwilioEventWriter, seconds: float
) -> int:
    """Media messages the bot sends while the caller is silent for `seconds`."""
    media = 0
    frames = int(seconds * 50)
    for frame in range(frames):
        await ws.send(twilio.media(b"\xff" * 160, frame * 20))
        try:
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 0.001))
                media += message["event"] == "media"
        except TimeoutError:
            pass
        await asyncio.sleep(0.02)
    return media


async def _hang_up(ws: websockets.ClientConnection, twilio: TwilioEventWriter) -> None:
    await ws.send(twilio.stop())
    await close_code(ws)


async def test_a_resumed_stream_is_not_greeted_and_keeps_a_record_of_its_own(
    servers: ServerThread, redis_url: str
) -> None:
    bot = gateway(servers, redis_url)
    call_sid = new_sid()

    ws, twilio = await _stream(bot, call_sid, 0)
    assert await _bot_audio_within(ws, twilio, 1.0) > 0, "a new call is greeted"
    await _hang_up(ws, twilio)
    await until_idle(bot)

    ws, twilio = await _stream(bot, call_sid, 1)
    assert await _bot_audio_within(ws, twilio, 1.5) == 0, "the resumed call is not"
    await _hang_up(ws, twilio)
    await until_idle(bot)

    store = RecordStore(bot.settings.calls_dir)
    for _ in range(50):
        if {call_sid, f"{call_sid}-resume1"} <= set(store.ids()):
            break
        await asyncio.sleep(0.1)
    resumed = store.open(f"{call_sid}-resume1")
    assert resumed.meta["resumes"] == call_sid  # the call it carries on
    assert "resumes" not in store.open(call_sid).meta


async def test_a_resumed_stream_that_floods_gives_its_slot_back(
    servers: ServerThread, redis_url: str
) -> None:
    bot = gateway(servers, redis_url)
    call_sid = new_sid()
    ws, twilio = await _stream(bot, call_sid, 1)
    # Stamped 20 s into a stream that began a moment ago: far faster than real time.
    for frame in range(3):
        await ws.send(twilio.media(b"\xff" * 160, 20_000 + frame * 20))
    assert await close_code(ws) is not None
    await until_idle(bot)
