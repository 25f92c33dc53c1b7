"""The server at its edges: signatures, bad input, capacity, health and metrics.

Raw HTTP and WebSocket clients play a forger and a broken peer; after each abuse a
normal call must still be answered.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
from xml.etree import ElementTree

import httpx
import pytest
import websockets
from websockets.asyncio.client import connect

from agents.cascade.agent import CascadeModels
from ops.simulate import SimulationConfig, simulate_call, voice_webhook_params
from telephony.protocol import TwilioEventWriter
from telephony.security import sign
from tests.conftest import AUTH_TOKEN, Bot, ServerThread, start_bot

pytestmark = pytest.mark.timeout(120)

CALL_SID = "CA" + "1" * 32
ACCOUNT_SID = "AC" + "2" * 32


def new_call_sid() -> str:
    """A CallSid of its own: each starts one stream only."""
    return "CA" + secrets.token_hex(16)


def webhook_params(call_sid: str = CALL_SID) -> dict[str, str]:
    return voice_webhook_params(call_sid, ACCOUNT_SID, "+15550100", "+15550199")


async def post_webhook(bot: Bot, params: dict[str, str], signature: str | None) -> httpx.Response:
    headers = {"X-Twilio-Signature": signature} if signature is not None else {}
    async with httpx.AsyncClient() as client:
        return await client.post(f"{bot.url}/twilio/voice", data=params, headers=headers)


def stream_ws_url(bot: Bot) -> str:
    return bot.url.replace("http://", "ws://") + "/twilio/media"


async def open_stream(bot: Bot, call_sid: str = CALL_SID) -> websockets.ClientConnection:
    """A signed stream handshake, as Twilio makes it."""
    signature = sign(AUTH_TOKEN, stream_ws_url(bot), {})
    # Unbounded, as Twilio reads every message: a full queue would stop the client reading
    # the socket, and the server's close frame behind the greeting would go unseen.
    headers = {"x-twilio-signature": signature}
    return await connect(stream_ws_url(bot), additional_headers=headers, max_queue=None)


def token_for(bot: Bot, call_sid: str = CALL_SID) -> str:
    return bot.services.tokens.issue(call_sid)


async def assert_still_answers(bot: Bot) -> None:
    report = await simulate_call(
        SimulationConfig(
            # Up to 3 s for the greeting to start on a busy box, then hang up.
            base_url=bot.url,
            auth_token=AUTH_TOKEN,
            hangup_after_ms=3000,
            max_call_s=3,
        )
    )
    assert report.greeting_start_ms is not None, "a follow-up call was not answered"
    assert report.protocol_violations == []


# --- signatures ------------------------------------------------------------------------


async def test_a_signed_webhook_gets_twiml_that_connects_a_stream_with_a_call_token(
    bot: Bot,
) -> None:
    params = webhook_params()
    reply = await post_webhook(bot, params, sign(AUTH_TOKEN, f"{bot.url}/twilio/voice", params))

    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/xml")
    stream = ElementTree.fromstring(reply.text).find("./Connect/Stream")
    assert stream is not None
    assert stream.get("url") == stream_ws_url(bot)
    assert stream.get("statusCallback") == f"{bot.url}/twilio/status"
    parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
    assert bot.services.tokens.verify(CALL_SID, parameters["token"] or "")


@pytest.mark.parametrize("signature", [None, "", "bm90LWEtc2lnbmF0dXJl"])
async def test_an_unsigned_or_forged_webhook_is_refused(bot: Bot, signature: str | None) -> None:
    reply = await post_webhook(bot, webhook_params(), signature)

    assert reply.status_code == 403


async def test_a_webhook_whose_parameters_were_tampered_with_is_refused(bot: Bot) -> None:
    params = webhook_params()
    signature = sign(AUTH_TOKEN, f"{bot.url}/twilio/voice", params)
    params["From"] = "+15559999"

    assert (await post_webhook(bot, params, signature)).status_code == 403


async def test_an_unsigned_stream_handshake_is_refused(bot: Bot) -> None:
    with pytest.raises(websockets.InvalidStatus) as refused:
        await connect(stream_ws_url(bot))
    assert refused.value.response.status_code == 403


async def test_a_stream_with_a_forged_call_token_is_closed_with_policy_violation(bot: Bot) -> None:
    twilio = TwilioEventWriter("MZ" + "3" * 32, CALL_SID, ACCOUNT_SID)
    async with await open_stream(bot) as ws:
        await ws.send(twilio.connected())
        await ws.send(twilio.start({"token": "0" * 32}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_a_call_token_is_only_good_for_its_own_call(bot: Bot) -> None:
    other_call = "CA" + "9" * 32
    twilio = TwilioEventWriter("MZ" + "3" * 32, other_call, ACCOUNT_SID)
    async with await open_stream(bot, other_call) as ws:
        await ws.send(twilio.connected())
        await ws.send(twilio.start({"token": token_for(bot, CALL_SID)}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_without_an_auth_token_the_server_serves_and_warns_once(
    servers: ServerThread, models: CascadeModels, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="app.main"):
        open_bot = start_bot(servers, models, twilio_auth_token="")
    warnings = [r for r in caplog.records if "TWILIO_AUTH_TOKEN is not set" in r.getMessage()]
    assert len(warnings) == 1

    reply = await post_webhook(open_bot, webhook_params(), None)
    assert reply.status_code == 200 and "<Connect>" in reply.text


# --- bad input on the stream -------------------------------------------------------------


async def started_stream(bot: Bot) -> tuple[websockets.ClientConnection, TwilioEventWriter]:
    call_sid = new_call_sid()
    twilio = TwilioEventWriter("MZ" + "4" * 32, call_sid, ACCOUNT_SID)
    ws = await open_stream(bot)
    await ws.send(twilio.connected())
    await ws.send(twilio.start({"token": token_for(bot, call_sid)}))
    return ws, twilio


def protocol_errors(bot: Bot, kind: str) -> float:
    value = bot.services.metrics.registry.get_sample_value(
        "offhook_protocol_errors_total", {"kind": kind}
    )
    return value or 0.0


def media_json(stream_sid: str, payload: str, chunk: int = 1) -> str:
    return json.dumps(
        {
            "event": "media",
            "sequenceNumber": str(chunk + 1),
            "streamSid": stream_sid,
            "media": {
                "track": "inbound",
                "chunk": str(chunk),
                "timestamp": str(chunk * 20),
                "payload": payload,
            },
        }
    )


BAD_FRAMES = {
    "invalid_json": "{this is not json",
    "unknown_event": json.dumps({"event": "teleport", "streamSid": "MZ" + "4" * 32}),
    "bad_base64": media_json("MZ" + "4" * 32, "***not base64***"),
    "payload_too_large": media_json("MZ" + "4" * 32, base64.b64encode(b"\xff" * 40_000).decode()),
    "message_too_large": json.dumps({"event": "media", "junk": "x" * 70_000}),
    "wrong_stream": media_json("MZ" + "5" * 32, base64.b64encode(b"\xff" * 160).decode()),
    "missing_field": json.dumps({"event": "media", "streamSid": "MZ" + "4" * 32}),
}


@pytest.mark.parametrize("kind", sorted(BAD_FRAMES))
async def test_a_malformed_frame_is_counted_and_the_call_goes_on(bot: Bot, kind: str) -> None:
    before = protocol_errors(bot, kind)
    ws, twilio = await started_stream(bot)
    async with ws:
        await ws.send(BAD_FRAMES[kind])
        # The call is still alive: the greeting keeps arriving after the bad frame.
        for frame in range(5):
            await ws.send(twilio.media(b"\xff" * 160, frame * 20))
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert message["event"] in ("media", "mark")
        await ws.send(twilio.stop())
    assert protocol_errors(bot, kind) == before + 1


async def test_binary_frames_are_counted_and_ignored(bot: Bot) -> None:
    before = protocol_errors(bot, "binary_frame")
    ws, twilio = await started_stream(bot)
    async with ws:
        await ws.send(b"\x00\x01\x02 binary")
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert message["event"] in ("media", "mark")
        await ws.send(twilio.stop())
    assert protocol_errors(bot, "binary_frame") == before + 1


async def test_media_before_start_is_ignored_and_the_call_still_starts(bot: Bot) -> None:
    call_sid = new_call_sid()
    twilio = TwilioEventWriter("MZ" + "4" * 32, call_sid, ACCOUNT_SID)
    async with await open_stream(bot) as ws:
        await ws.send(twilio.connected())
        await ws.send(media_json("MZ" + "4" * 32, base64.b64encode(b"\xff" * 160).decode()))
        await ws.send(twilio.start({"token": token_for(bot, call_sid)}))
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert message["event"] == "media"
        await ws.send(twilio.stop())


async def test_abrupt_disconnects_leave_the_server_answering(bot: Bot) -> None:
    for _ in range(3):
        ws, _twilio = await started_stream(bot)
        await asyncio.wait_for(ws.recv(), 10)  # mid-greeting
        ws.transport.abort()  # no stop, no close frame: the line just drops
    await asyncio.sleep(0.5)
    assert bot.services.active_calls == 0
    await assert_still_answers(bot)


async def test_a_stream_that_never_starts_is_closed(
    bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.main.START_TIMEOUT_S", 0.5)
    async with await open_stream(bot) as ws:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_after_every_abuse_a_normal_call_is_answered(bot: Bot) -> None:
    await assert_still_answers(bot)


# --- capacity, health, metrics ----------------------------------------------------------


async def test_callers_beyond_capacity_hear_a_busy_message(
    servers: ServerThread, models: CascadeModels
) -> None:
    small = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, max_calls=1)
    first = asyncio.create_task(
        simulate_call(
            SimulationConfig(base_url=small.url, auth_token=AUTH_TOKEN, hangup_after_ms=3000)
        )
    )
    while small.services.active_calls == 0:  # noqa: ASYNC110 - polling another thread
        await asyncio.sleep(0.05)
    params = webhook_params("CA" + "7" * 32)
    signature = sign(AUTH_TOKEN, f"{small.url}/twilio/voice", params)
    reply = await post_webhook(small, params, signature)
    assert "<Say>" in reply.text and "busy" in reply.text and "<Connect>" not in reply.text
    report = await first
    assert report.greeting_start_ms is not None


@pytest.mark.slow  # loads the models
async def test_health_is_ready_only_once_models_are_loaded(servers: ServerThread) -> None:
    loading = start_bot(
        servers,
        None,
        twilio_auth_token=AUTH_TOKEN,
        model_cache_dir="/nonexistent/cache",
        stt_model="/nonexistent/model",
    )
    async with httpx.AsyncClient() as client:
        for _ in range(100):
            reply = await client.get(f"{loading.url}/healthz")
            if reply.json()["status"] == "error":
                break
            assert reply.status_code == 503
            await asyncio.sleep(0.1)
    assert reply.status_code == 503 and reply.json()["status"] == "error"
    params = webhook_params()
    twiml = await post_webhook(
        loading, params, sign(AUTH_TOKEN, f"{loading.url}/twilio/voice", params)
    )
    assert "<Say>" in twiml.text and "<Connect>" not in twiml.text


async def test_health_and_metrics_of_a_ready_server(bot: Bot) -> None:
    await assert_still_answers(bot)
    async with httpx.AsyncClient() as client:
        health = await client.get(f"{bot.url}/healthz")
        metrics = await client.get(f"{bot.url}/metrics")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    text = metrics.text
    for name in (
        "offhook_active_calls",
        "offhook_calls_total",
        "offhook_end_of_turn_seconds_bucket",
        "offhook_stt_seconds_bucket",
        "offhook_llm_first_token_seconds_bucket",
        "offhook_tts_first_audio_seconds_bucket",
        "offhook_mouth_to_mouth_seconds_bucket",
        "offhook_barge_ins_total",
        "offhook_errors_total",
    ):
        assert name in text, name
    assert 'offhook_calls_total{outcome="completed"}' in text
