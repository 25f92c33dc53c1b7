"""On the open internet: what a stranger sends cannot take slots, memory or the loop.

Each test plays one attack against a real server on 127.0.0.1 (raw sockets, httpx and
a WebSocket client speaking Twilio's protocol) and checks that it fails; where the
attack could hurt others, a live call runs beside it and must hear no underrun.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import secrets
import time
import wave
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest
import websockets
from websockets.asyncio.client import connect

from agents.cascade.agent import CascadeModels
from app.call import public_fields
from callevents import BotTurn, FirstAudio
from ops.simulate import CallReport, SimulationConfig, simulate_call, voice_webhook_params
from recordings.store import RecordStore
from telephony.protocol import TwilioEventWriter
from telephony.security import CallTokens, sign
from tests.conftest import AUTH_TOKEN, Bot, ServerThread, start_bot

pytestmark = pytest.mark.timeout(120)

ACCOUNT_SID = "AC" + "2" * 32


def new_sid(prefix: str = "CA") -> str:
    return prefix + secrets.token_hex(16)


def webhook_params(call_sid: str | None = None, **changes: str) -> dict[str, str]:
    params = voice_webhook_params(call_sid or new_sid(), ACCOUNT_SID, "+15550100", "+15550199")
    params.update(changes)
    return params


async def post_signed(
    bot: Bot, params: dict[str, str], *, path: str = "/twilio/voice", query: str = ""
) -> httpx.Response:
    url = f"{bot.url}{path}" + (f"?{query}" if query else "")
    headers = {"X-Twilio-Signature": sign(AUTH_TOKEN, url, params)}
    async with httpx.AsyncClient() as client:
        return await client.post(url, data=params, headers=headers)


async def raw_http(bot: Bot, request: bytes, *, within: float = 5.0) -> tuple[int, float]:
    """Send raw bytes; the response's status and how long it took to come."""
    host, port = bot.url.removeprefix("http://").split(":")
    began = time.monotonic()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), within)
    finally:
        writer.close()
    return int(status_line.split()[1]), time.monotonic() - began


def stream_ws_url(bot: Bot) -> str:
    return bot.url.replace("http://", "ws://") + "/twilio/media"


async def open_stream(bot: Bot) -> websockets.ClientConnection:
    headers = {"x-twilio-signature": sign(AUTH_TOKEN, stream_ws_url(bot), {})}
    # Twilio reads every message it is sent: a client that leaves them queued would
    # stop reading the socket and miss the server's close frame behind them.
    return await connect(stream_ws_url(bot), additional_headers=headers, max_queue=None)


async def start_stream(
    bot: Bot, call_sid: str | None = None, *, token: str | None = None, account: str = ACCOUNT_SID
) -> tuple[websockets.ClientConnection, TwilioEventWriter]:
    call_sid = call_sid or new_sid()
    twilio = TwilioEventWriter(new_sid("MZ"), call_sid, account)
    ws = await open_stream(bot)
    await ws.send(twilio.connected())
    token = bot.services.tokens.issue(call_sid) if token is None else token
    await ws.send(twilio.start({"token": token, "from": "+15551234567"}))
    return ws, twilio


async def close_code(ws: websockets.ClientConnection, within: float = 10.0) -> int | None:
    """Read until the server closes; its close code."""
    try:
        async with asyncio.timeout(within):
            while True:
                await ws.recv()
    except websockets.ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None


async def alive(ws: websockets.ClientConnection, twilio: TwilioEventWriter) -> bool:
    """The call answers: bot audio or marks keep coming while we send media."""
    for frame in range(5):
        await ws.send(twilio.media(b"\xff" * 160, frame * 20))
    try:
        message = json.loads(await asyncio.wait_for(ws.recv(), 10))
    except (TimeoutError, websockets.ConnectionClosed):
        return False
    return bool(message["event"] in ("media", "mark"))


async def beside_a_live_call(bot: Bot, attack: Callable[[], Awaitable[None]]) -> CallReport:
    """Run `attack` while a real call hears its greeting; the call's report."""
    call = asyncio.create_task(
        simulate_call(
            SimulationConfig(base_url=bot.url, auth_token=AUTH_TOKEN, hangup_after_ms=300)
        )
    )
    await asyncio.sleep(1.5)  # the greeting is playing
    await attack()
    report = await call
    assert report.greeting_start_ms is not None, "the live call was not answered"
    assert report.protocol_violations == []
    return report


def rejected(bot: Bot, reason: str) -> float:
    value = bot.services.metrics.registry.get_sample_value(
        "offhook_rejected_calls_total", {"reason": reason}
    )
    return value or 0.0


def dropped(bot: Bot, what: str) -> float:
    value = bot.services.metrics.registry.get_sample_value("offhook_dropped_total", {"what": what})
    return value or 0.0


async def record_of(bot: Bot, call_sid: str) -> Any:
    store = RecordStore(bot.settings.calls_dir)
    for _ in range(100):
        if (
            call_sid not in bot.services.open_records
            and (bot.settings.calls_dir / call_sid).exists()
        ):
            record = store.open(call_sid)
            if record.meta.get("ended_at"):
                return record
        await asyncio.sleep(0.1)
    raise AssertionError(f"no finished record for {call_sid}")


async def until_idle(bot: Bot) -> None:
    for _ in range(100):
        if bot.services.active_calls == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("a call slot was never given back")


# --- 1. secure by default -------------------------------------------------------------


async def test_signatures_are_checked_against_public_url_never_the_host_header(
    servers: ServerThread, models: CascadeModels
) -> None:
    behind_proxy = start_bot(
        servers, models, twilio_auth_token=AUTH_TOKEN, public_url="https://bot.example.com"
    )
    params = webhook_params()
    # A signature Twilio made for whatever the Host header names (another app of the
    # same account, reached through this server) is not one for us.
    as_host_says = f"{behind_proxy.url}/twilio/voice"
    async with httpx.AsyncClient() as client:
        forged = await client.post(
            as_host_says,
            data=params,
            headers={"X-Twilio-Signature": sign(AUTH_TOKEN, as_host_says, params)},
        )
        genuine = await client.post(
            as_host_says,
            data=params,
            headers={
                "X-Twilio-Signature": sign(
                    AUTH_TOKEN, "https://bot.example.com/twilio/voice", params
                )
            },
        )
    assert forged.status_code == 403
    assert genuine.status_code == 200 and "wss://bot.example.com/twilio/media" in genuine.text


async def test_a_flood_of_forged_webhooks_is_counted_not_logged_line_by_line(
    bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    # A log line per forged request fills the operator's disk, and a server whose
    # stderr pipe is not drained fast enough stalls its event loop on the write.
    async with httpx.AsyncClient() as client:
        with caplog.at_level(logging.INFO):
            for _ in range(5):
                answers = await asyncio.gather(
                    *(
                        client.post(
                            f"{bot.url}/twilio/voice",
                            data=webhook_params(),
                            headers={"X-Twilio-Signature": "Zm9yZ2Vk"},
                        )
                        for _ in range(10)
                    )
                )
                assert {a.status_code for a in answers} == {403}
        metrics = (await client.get(f"{bot.url}/metrics")).text
    warned = [r for r in caplog.records if "invalid X-Twilio-Signature" in r.getMessage()]
    assert 1 <= len(warned) <= 5
    counted = re.search(r'offhook_rejected_calls_total\{reason="bad_signature"\} (\S+)', metrics)
    assert counted is not None and float(counted.group(1)) >= 50


# --- 2. bounded before parsing --------------------------------------------------------


async def test_a_huge_declared_body_is_refused_from_its_headers_beside_a_live_call(
    bot: Bot,
) -> None:
    timings: list[float] = []

    async def attack() -> None:
        for _ in range(20):
            # 100 MB promised, nothing sent: the answer cannot have waited for the body.
            status, took = await raw_http(
                bot,
                b"POST /twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 100000000\r\n\r\n",
            )
            assert status == 413
            timings.append(took)

    report = await beside_a_live_call(bot, attack)
    assert report.underruns == 0
    assert max(timings) < 2.0


async def test_an_endless_chunked_body_is_cut_at_the_cap(bot: Bot) -> None:
    chunk = b"a=" + b"x" * 8190
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(16))
    status, _ = await raw_http(
        bot,
        b"POST /twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Twilio-Signature: x\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + body,
    )
    assert status == 413


async def test_an_unsigned_webhook_is_refused_before_its_body_is_read(bot: Bot) -> None:
    # A body is promised and never sent: only an answer from the headers comes back.
    status, took = await raw_http(
        bot,
        b"POST /twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 4000\r\n\r\n",
    )
    assert status == 403 and took < 2.0


async def test_multipart_uploads_are_refused_before_parsing_beside_a_live_call(bot: Bot) -> None:
    upload = {"file": ("big.bin", b"\0" * 1_000_000, "application/octet-stream")}

    async def attack() -> None:
        async with httpx.AsyncClient() as client:
            for _ in range(10):
                reply = await client.post(
                    f"{bot.url}/twilio/voice", data=webhook_params(), files=upload
                )
                assert reply.status_code == 415
                reply = await client.post(f"{bot.url}/twilio/status", data={"a": "b"}, files=upload)
                assert reply.status_code == 415

    report = await beside_a_live_call(bot, attack)
    assert report.underruns == 0


@pytest.mark.parametrize(
    ("name", "request_bytes", "status"),
    [
        (
            "not-utf8",
            b"POST /twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Twilio-Signature: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 12\r\n\r\n"
            b"CallSid=%ff\xfe",
            400,
        ),
        (
            "too-many-fields",
            b"POST /twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Twilio-Signature: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1599\r\n\r\n"
            + b"&".join([b"a=b"] * 400),
            400,
        ),
        ("get", b"GET /twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 405),
        (
            "json",
            b"POST /twilio/voice HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
            415,
        ),
    ],
)
async def test_a_malformed_webhook_gets_a_4xx(
    bot: Bot, name: str, request_bytes: bytes, status: int
) -> None:
    got, _ = await raw_http(bot, request_bytes)
    assert got == status, name


@pytest.mark.parametrize(
    ("field", "value", "status"),
    [
        ("CallSid", "CA123", 400),
        ("CallSid", "CA" + "Z" * 32, 400),
        ("AccountSid", "AC-not-an-account", 400),
        ("From", "+1555\x1b[2J0100", 400),
        ("From", "sip:caller\r\nX-Injected: 1@example.com", 400),
    ],
)
async def test_a_signed_webhook_with_a_malformed_field_gets_a_4xx(
    bot: Bot, field: str, value: str, status: int
) -> None:
    reply = await post_signed(bot, webhook_params(**{field: value}))
    assert reply.status_code == status


async def test_a_long_sip_uri_caller_is_answered_with_the_address_cut(bot: Bot) -> None:
    sip = "sip:" + "a" * 600 + "@example.com"
    reply = await post_signed(bot, webhook_params(From=sip))

    assert reply.status_code == 200 and "<Connect>" in reply.text
    stream = ElementTree.fromstring(reply.text).find("./Connect/Stream")
    assert stream is not None
    parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
    assert sip.startswith(parameters["from"] or "-") and len(parameters["from"] or "") == 256


async def test_a_webhook_url_with_a_query_string_verifies_with_its_query(bot: Bot) -> None:
    params = webhook_params()
    signed_with_query = await post_signed(bot, params, query="tenant=blue&x=1")
    assert signed_with_query.status_code == 200

    url = f"{bot.url}/twilio/voice"
    async with httpx.AsyncClient() as client:
        query_added_later = await client.post(
            f"{url}?tenant=red",
            data=params,
            headers={"X-Twilio-Signature": sign(AUTH_TOKEN, url, params)},
        )
    assert query_added_later.status_code == 403


async def test_a_host_header_with_a_question_mark_gets_a_400(
    servers: ServerThread, models: CascadeModels
) -> None:
    # Only an unsigned server on loopback builds URLs from the Host header.
    local = start_bot(servers, models, twilio_auth_token="", public_url="")
    body = "&".join(f"{k}={v}" for k, v in webhook_params().items()).replace("+", "%2B")
    status, _ = await raw_http(
        local,
        b"POST /twilio/voice HTTP/1.1\r\nHost: evil?x=1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body.encode()),
    )
    assert status == 400


async def test_a_webhook_from_another_account_is_refused(
    servers: ServerThread, models: CascadeModels
) -> None:
    ours = "AC" + "7" * 32
    strict = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, twilio_account_sid=ours)

    assert (await post_signed(strict, webhook_params(AccountSid=ACCOUNT_SID))).status_code == 403
    assert (await post_signed(strict, webhook_params(AccountSid=ours))).status_code == 200
    ws, _ = await start_stream(strict, account=ACCOUNT_SID)
    async with ws:
        assert await close_code(ws) == 1008
    assert rejected(strict, "wrong_account") == 1
    # Twilio calling for our own account is served.
    report = await simulate_call(
        SimulationConfig(
            base_url=strict.url, auth_token=AUTH_TOKEN, account_sid=ours, hangup_after_ms=300
        )
    )
    assert report.greeting_start_ms is not None


# --- 3. a slot is always given back ---------------------------------------------------


async def test_a_slot_is_given_back_when_the_session_fails_to_start(
    servers: ServerThread, models: CascadeModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    single = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, max_calls=1)

    class Broken(RuntimeError):
        pass

    def fail(*args: object, **kwargs: object) -> None:
        raise Broken("the front end could not start")

    with monkeypatch.context() as patch:
        patch.setattr("app.call.FrontEnd", fail)
        for _ in range(3):
            ws, _twilio = await start_stream(single)
            async with ws:
                await close_code(ws)
    await until_idle(single)
    # The one slot is free again: a real caller gets through.
    report = await simulate_call(
        SimulationConfig(base_url=single.url, auth_token=AUTH_TOKEN, hangup_after_ms=300)
    )
    assert report.greeting_start_ms is not None


async def test_the_persona_file_is_read_once_at_start_up(
    servers: ServerThread, models: CascadeModels, tmp_path: Path
) -> None:
    persona = tmp_path / "persona.txt"
    persona.write_text("You answer in one word.")
    bot = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, system_prompt_file=str(persona))
    persona.unlink()  # a file that goes away later cannot fail calls

    report = await simulate_call(
        SimulationConfig(base_url=bot.url, auth_token=AUTH_TOKEN, hangup_after_ms=300)
    )
    assert report.greeting_start_ms is not None
    await until_idle(bot)
    assert bot.services.persona == "You answer in one word."


# --- 4. stream tokens -----------------------------------------------------------------


async def test_a_replayed_call_token_is_refused(bot: Bot) -> None:
    call_sid = new_sid()
    token = bot.services.tokens.issue(call_sid)
    ws, twilio = await start_stream(bot, call_sid, token=token)
    async with ws:
        assert await alive(ws, twilio)
        await ws.send(twilio.stop())
    before = rejected(bot, "replayed_call_token")

    replay, _ = await start_stream(bot, call_sid, token=token)
    async with replay:
        assert await close_code(replay) == 1008
    assert rejected(bot, "replayed_call_token") == before + 1


async def test_a_second_stream_for_a_live_call_is_refused_and_the_call_goes_on(bot: Bot) -> None:
    call_sid = new_sid()
    token = bot.services.tokens.issue(call_sid)
    first, twilio = await start_stream(bot, call_sid, token=token)
    async with first:
        assert await alive(first, twilio)
        second, _ = await start_stream(bot, call_sid, token=token)
        async with second:
            assert await close_code(second) == 1008
        assert await alive(first, twilio)
        await first.send(twilio.stop())


async def test_an_expired_call_token_is_refused(bot: Bot) -> None:
    call_sid = new_sid()
    old = CallTokens(bot.settings.token_secret, clock=lambda: time.time() - 120).issue(call_sid)

    ws, _ = await start_stream(bot, call_sid, token=old)
    async with ws:
        assert await close_code(ws) == 1008


async def test_a_silent_stream_is_closed_after_the_media_timeout(
    servers: ServerThread, models: CascadeModels
) -> None:
    quick = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, media_timeout_s=1.0)
    call_sid = new_sid()
    ws, twilio = await start_stream(quick, call_sid)
    async with ws:
        assert await alive(ws, twilio)
        began = time.monotonic()
        # Marks and nothing else: only media proves the line is alive.
        assert await close_code(ws, within=10) is not None
        assert time.monotonic() - began < 4
    assert (await record_of(quick, call_sid)).meta["ended_with"] == "timeout"
    await until_idle(quick)


async def test_a_call_is_ended_at_its_maximum_length(
    servers: ServerThread, models: CascadeModels
) -> None:
    short = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, max_call_s=2.0)
    call_sid = new_sid()
    ws, twilio = await start_stream(short, call_sid)
    began = time.monotonic()
    async with ws:
        closing = asyncio.create_task(close_code(ws, within=8))

        async def talk() -> None:  # media never stops: the call is alive, just long
            with contextlib.suppress(websockets.ConnectionClosed):
                for frame in range(400):
                    await ws.send(twilio.media(b"\xff" * 160, frame * 20))
                    await asyncio.sleep(0.02)

        talking = asyncio.create_task(talk())
        assert await closing is not None
        talking.cancel()
    assert time.monotonic() - began < 4
    assert (await record_of(short, call_sid)).meta["ended_with"] == "max_length"


async def test_sockets_that_never_start_count_toward_a_limit_and_time_out(
    servers: ServerThread, models: CascadeModels, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.main.START_TIMEOUT_S", 2.0)
    small = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, max_calls=1)
    limit = small.services.admission.max_pending
    idle = [await open_stream(small) for _ in range(limit)]
    with pytest.raises(websockets.InvalidStatus):
        await open_stream(small)  # one too many, refused at the handshake
    for ws in idle:
        assert await close_code(ws) == 1008  # each timed out waiting for `start`
    assert small.services.admission.pending == 0
    ws, twilio = await start_stream(small)
    async with ws:
        assert await alive(ws, twilio)
        await ws.send(twilio.stop())


# --- 5. caps --------------------------------------------------------------------------


def caller_wav_seconds(record: Any) -> float:
    with wave.open(str(record.path / "caller.wav")) as wav:
        return wav.getnframes() / wav.getframerate()


async def test_a_media_flood_is_closed_beside_a_live_call(bot: Bot) -> None:
    call_sid = new_sid()
    codes: list[int | None] = []

    async def attack() -> None:
        ws, twilio = await start_stream(bot, call_sid)
        async with ws:
            closing = asyncio.create_task(close_code(ws))
            with contextlib.suppress(websockets.ConnectionClosed):
                for frame in range(3000):  # a minute of audio, as fast as it goes
                    await ws.send(twilio.media(b"\xff" * 160, frame * 20))
            codes.append(await closing)

    report = await beside_a_live_call(bot, attack)
    assert report.underruns == 0
    assert codes == [1008]
    record = await record_of(bot, call_sid)
    assert record.meta["ended_with"] == "flood"
    assert caller_wav_seconds(record) < 6  # what the pace allowed, not a minute


async def test_a_timestamp_jump_flood_is_capped(bot: Bot) -> None:
    call_sid = new_sid()
    ws, twilio = await start_stream(bot, call_sid)
    async with ws:
        closing = asyncio.create_task(close_code(ws))
        with contextlib.suppress(websockets.ConnectionClosed):
            # One byte per frame, each claiming two seconds later: gap fill would
            # turn 200 bytes into 400 s of audio.
            for frame in range(200):
                await ws.send(twilio.media(b"\xff", frame * 2000))
                await asyncio.sleep(0.005)
        assert await closing == 1008
    record = await record_of(bot, call_sid)
    assert record.meta["ended_with"] == "flood"
    assert caller_wav_seconds(record) < 8


async def test_a_record_is_capped_and_says_so(servers: ServerThread, models: CascadeModels) -> None:
    capped = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, max_record_mb=0.05)
    record, _transcript = await keyed_call(capped, "", gap_s=0.0, talk_s=4.0)

    assert record.meta["truncated"] is True
    assert caller_wav_seconds(record) < 1.6  # 50 kB for both 16-bit tracks and events
    # The cap, plus headers, meta.json and transcript.json written at the end.
    assert sum(p.stat().st_size for p in record.path.iterdir()) < 50_000 + 10_000


async def keyed_call(bot: Bot, digits: str, gap_s: float, talk_s: float = 2.0) -> tuple[Any, Any]:
    """A call whose caller keys `digits`, `gap_s` apart; its record once it is over."""
    call_sid = new_sid()
    ws, twilio = await start_stream(bot, call_sid)
    async with ws:
        reading = asyncio.create_task(close_code(ws, within=60))
        frame = 0

        async def talk(seconds: float) -> None:
            nonlocal frame
            for _ in range(int(seconds / 0.02)):
                await ws.send(twilio.media(b"\xff" * 160, frame * 20))
                frame += 1
                await asyncio.sleep(0.02)

        await talk(0.5)
        for digit in digits:
            await ws.send(twilio.dtmf(digit))
            await talk(gap_s)
        await talk(talk_s)  # the keypad turn closes 0.8 s after the last key
        await ws.send(twilio.stop())
        await reading
    record = await record_of(bot, call_sid)
    return record, record.transcript()


def keypad_turns(transcript: Any) -> list[str]:
    return [
        t["text"]
        for t in transcript["turns"]
        if t["speaker"] == "caller" and ("keypad" in t["text"] or "entered" in t["text"])
    ]


async def test_a_keypad_flood_is_rate_limited(bot: Bot) -> None:
    before = dropped(bot, "dtmf")
    record, transcript = await keyed_call(bot, "7" * 100, gap_s=0.0)

    assert dropped(bot, "dtmf") >= before + 80
    pressed = "".join(keypad_turns(transcript)).count("7")
    assert 1 <= pressed <= 20
    assert sum(1 for e in record.timeline() if e["event"] == "dtmf") == pressed


async def test_one_keypad_turn_holds_at_most_32_digits(bot: Bot) -> None:
    # Six keys a second is within the rate, but the turn never pauses.
    _record, transcript = await keyed_call(bot, "5" * 45, gap_s=1 / 6)

    turns = keypad_turns(transcript)
    assert [turn.count("5") for turn in turns] == [32]


# --- 6. privacy -----------------------------------------------------------------------

# The keyed digits, run together or separated, but not inside a longer number: a timing
# such as 859.4775009987643 ms in a log line is not the caller's PIN.
KEYED_9876 = re.compile(r"(?<![\d.])9\D?8\D?7\D?6(?!\d)")


async def test_digits_and_numbers_stay_out_of_logs_and_with_redact_dtmf_out_of_records(
    servers: ServerThread, models: CascadeModels, caplog: pytest.LogCaptureFixture
) -> None:
    private = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, redact_dtmf=True)
    with caplog.at_level(logging.INFO):
        await post_signed(private, webhook_params(From="+15551234567"))
        record, transcript = await keyed_call(private, "9876", gap_s=0.2)
    logged = "\n".join(r.getMessage() for r in caplog.records)

    assert "+15551234567" not in logged and "+1***4567" in logged, logged
    assert not re.search(KEYED_9876, logged), logged
    assert keypad_turns(transcript) == ["(The caller entered 4 digits.)"], transcript
    on_disk = "".join(p.read_text(errors="replace") for p in record.path.glob("*.json*"))
    assert not re.search(KEYED_9876, on_disk)
    assert "9" not in "".join(e.get("digits", "") for e in record.timeline())
    assert record.meta["from"] == "+1***4567"


async def test_digits_reach_logs_only_at_debug(bot: Bot, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        _record, transcript = await keyed_call(bot, "9876", gap_s=0.2)
    logged = "\n".join(r.getMessage() for r in caplog.records)

    assert keypad_turns(transcript) == ["(The caller pressed 9 8 7 6 on the keypad.)"]
    assert not re.search(KEYED_9876, logged)


def test_what_the_bot_says_reaches_info_logs_as_its_timing_only() -> None:
    # The LLM may read keyed digits back to the caller: the bot's words are as private
    # as the caller's (CI once logged a reply that repeated them, before this held).
    said = "I have 9 8 7 6 as your account number."
    turn = BotTurn(turn_id=3, text=said, intended=said, start_ms=20.0, end_ms=2400.0)
    clause = FirstAudio(ms=640.0, text=said)

    assert public_fields(turn) == {
        "turn_id": 3,
        "truncated": False,
        "start_ms": 20.0,
        "end_ms": 2400.0,
    }
    assert public_fields(clause) == {"ms": 640.0}


async def test_a_call_record_is_private_to_the_service_user(bot: Bot) -> None:
    ws, twilio = await start_stream(bot)
    call_sid = twilio.call_sid
    async with ws:
        assert await alive(ws, twilio)
        await ws.send(twilio.stop())
    record = await record_of(bot, call_sid)

    assert (record.path.stat().st_mode & 0o777) == 0o700
    assert (bot.settings.calls_dir.stat().st_mode & 0o777) == 0o700
    modes = {p.name: p.stat().st_mode & 0o777 for p in record.path.iterdir()}
    assert modes and set(modes.values()) == {0o600}, modes


@pytest.mark.slow  # loads the models
async def test_health_shows_strangers_no_load_errors(servers: ServerThread) -> None:
    broken = start_bot(
        servers,
        None,
        twilio_auth_token=AUTH_TOKEN,
        model_cache_dir="/nonexistent/secret-path",
        stt_model="/nonexistent/model",
    )
    async with httpx.AsyncClient() as client:
        for _ in range(100):
            reply = await client.get(f"{broken.url}/healthz")
            if reply.json()["status"] == "error":
                break
            await asyncio.sleep(0.1)
    assert reply.status_code == 503 and reply.json() == {"status": "error"}
    assert "nonexistent" not in reply.text
    assert broken.services.load_error  # the operator still has it (and in the log)


# --- 7. memory ------------------------------------------------------------------------


async def test_nothing_keeps_a_finished_call_in_memory(bot: Bot) -> None:
    sessions: list[weakref.ref[Any]] = []
    for _ in range(3):
        ws, twilio = await start_stream(bot)
        async with ws:
            assert await alive(ws, twilio)
            sessions.append(weakref.ref(bot.services.calls[twilio.call_sid]))
            await ws.send(twilio.stop())
        await record_of(bot, twilio.call_sid)
    await until_idle(bot)

    # Freed by the server's own sweep as the calls end (app/heap.py), not by a
    # collection the test runs: Python's would come only dozens of calls later.
    for _ in range(100):
        if all(ref() is None for ref in sessions):
            break
        await asyncio.sleep(0.05)
    assert bot.services.calls == {}
    assert [ref() for ref in sessions] == [None, None, None], "a finished call's session lives on"
