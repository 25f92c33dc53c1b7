"""Outbound calls end to end: `offhook call` and `POST /calls` create the call on the fake
Twilio REST API (tests/fake_twilio.py), which then dials it the way Twilio does: status
callbacks, the voice webhook with `Direction=outbound-api`, the stream (the simulator
plays the callee: a person, or an answering machine with a greeting and a beep), and the
answering-machine verdict. The bot greets a person once the verdict is in; it leaves the
voicemail message after a machine's beep, or hangs up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from agents.cascade.agent import CascadeModels
from callevents import CallStatus
from cli.main import main as offhook
from ops.local_server import ServerThread
from ops.simulate import BEEP_MS, CallerTurn, answering_machine
from tests.conftest import AUTH_TOKEN, Bot, start_bot
from tests.fake_twilio import FakeCall, FakeTwilio, callback_params, dial, post_callback
from tests.test_call_control_calls import bot_lines, record_of, timeline

pytestmark = pytest.mark.timeout(240)

CALLEE = "+15551234567"
CALLER_ID = "+15550100"
API_TOKEN = "calls-api-token-for-tests"
GREETING = "Hi, this is the pharmacy calling about your prescription."
VOICEMAIL = "Hi, this is the pharmacy. Your prescription is ready. Goodbye."
MACHINE = "Hi, you have reached Sam. Please leave a message after the beep."


@pytest.fixture
def twilio(servers: ServerThread) -> Iterator[FakeTwilio]:
    fake = FakeTwilio(AUTH_TOKEN)
    fake.serve(servers)
    yield fake


def outbound_bot(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio, **overrides: object
) -> Bot:
    settings: dict[str, object] = {
        "twilio_auth_token": AUTH_TOKEN,
        "twilio_account_sid": twilio.account_sid,
        "twilio_api_url": twilio.url,
        "outbound_from": CALLER_ID,
        "calls_api_token": API_TOKEN,
    }
    return start_bot(servers, models, **{**settings, **overrides})


async def post_calls(bot: Bot, body: object, token: str | None = API_TOKEN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(f"{bot.url}/calls", json=body, headers=headers)


def created(twilio: FakeTwilio, call_sid: str) -> FakeCall:
    call = twilio.calls[call_sid]
    assert call.direction == "outbound-api" and call.status == "queued"
    return call


async def test_offhook_call_places_a_call_that_greets_the_person_who_answers(
    servers: ServerThread,
    models: CascadeModels,
    twilio: FakeTwilio,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bot = outbound_bot(servers, models, twilio)
    for name, value in {
        "PUBLIC_URL": bot.url,
        "TWILIO_ACCOUNT_SID": twilio.account_sid,
        "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "TWILIO_API_URL": twilio.url,
    }.items():
        monkeypatch.setenv(name, value)

    assert offhook(["call", CALLEE, "--from", CALLER_ID, "--greeting", GREETING]) == 0
    call = created(twilio, capsys.readouterr().out.strip())

    [create] = twilio.creates()
    assert create.authorized
    assert (create.one("To"), create.one("From"), create.one("Method")) == (
        CALLEE,
        CALLER_ID,
        "POST",
    )
    url = urlsplit(create.one("Url") or "")
    assert f"{url.scheme}://{url.netloc}{url.path}" == f"{bot.url}/twilio/voice"
    assert parse_qs(url.query) == {"outbound": ["1"], "amd": ["1"], "greeting": [GREETING]}
    assert create.one("StatusCallback") == f"{bot.url}/twilio/call-status"
    assert create.form["StatusCallbackEvent"] == ["initiated", "ringing", "answered", "completed"]
    assert (create.one("MachineDetection"), create.one("AsyncAmd")) == ("DetectMessageEnd", "true")
    assert create.one("AsyncAmdStatusCallback") == f"{bot.url}/twilio/amd"

    # A person picks up and says hello; Twilio's AMD calls it a human 1.5 s later.
    dialed = await dial(
        call,
        bot.url,
        AUTH_TOKEN,
        [CallerTurn(text="Hello?", after="start", delay_ms=300)],
        answered_by="human",
        amd_after=(0, 1500),
        hangup_after_ms=3000,
    )

    report = dialed.report
    assert report.protocol_violations == []
    assert (await bot_lines(bot, report))[0] == GREETING
    assert dialed.amd_at_ms is not None
    # Silent until the verdict: a machine's greeting must not be talked over.
    assert report.bot_utterances[0][0] >= dialed.amd_at_ms
    meta = await record_of(bot, call.sid)
    assert (meta["direction"], meta["answered_by"]) == ("outbound", "human")


async def test_post_calls_places_a_call_only_with_the_bearer_token(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = outbound_bot(servers, models, twilio)

    assert (await post_calls(bot, {"to": CALLEE}, token=None)).status_code == 401
    assert (await post_calls(bot, {"to": CALLEE}, token="wrong")).status_code == 401
    assert twilio.creates() == []
    answer = await post_calls(bot, {"to": CALLEE, "greeting": GREETING})

    assert answer.status_code == 201
    call = created(twilio, answer.json()["call_sid"])
    assert (call.to, call.from_) == (CALLEE, CALLER_ID)
    assert parse_qs(urlsplit(call.form["Url"][0]).query)["greeting"] == [GREETING]
    assert (await post_calls(bot, {"to": "5551234"})).status_code == 400


async def test_post_calls_is_off_without_a_token_setting(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = outbound_bot(servers, models, twilio, calls_api_token="")

    answer = await post_calls(bot, {"to": CALLEE}, token="anything")

    assert answer.status_code == 403
    assert twilio.creates() == []


async def test_post_calls_reports_twilio_refusing_the_call(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = outbound_bot(servers, models, twilio, twilio_auth_token="not-the-account-token")

    answer = await post_calls(bot, {"to": CALLEE})

    assert answer.status_code == 502
    assert answer.json()["twilio_code"] == 20003


# --- voicemail -------------------------------------------------------------------------


async def test_a_machine_gets_the_voicemail_message_after_the_beep(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = outbound_bot(servers, models, twilio, voicemail_message=VOICEMAIL)
    call = created(twilio, (await post_calls(bot, {"to": CALLEE})).json()["call_sid"])

    dialed = await dial(
        call,
        bot.url,
        AUTH_TOKEN,
        answering_machine(MACHINE),
        answered_by="machine_end_beep",
        amd_after=(1, BEEP_MS),  # DetectMessageEnd: the verdict as the beep ends
        hangup_after_ms=15000,
    )

    report = dialed.report
    beep_end = report.turns[1].speech_end_ms
    assert await bot_lines(bot, report) == [VOICEMAIL]
    assert report.bot_utterances[0][0] >= beep_end, "the message started before the beep"
    assert report.server_closed, "the bot did not hang up after its message"
    assert report.closed_ms is not None and report.closed_ms >= report.bot_utterances[-1][1]
    meta = await record_of(bot, call.sid)
    assert meta["answered_by"] == "machine_end_beep"
    assert (meta["ended_with"], meta["end_reason"]) == ("bot_hangup", "voicemail")


async def test_without_a_voicemail_message_a_machine_is_hung_up_on(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = outbound_bot(servers, models, twilio)
    call = created(twilio, (await post_calls(bot, {"to": CALLEE})).json()["call_sid"])
    sid = call.sid

    dialed = await dial(
        call,
        bot.url,
        AUTH_TOKEN,
        answering_machine(MACHINE),
        answered_by="machine_end_beep",
        amd_after=(1, BEEP_MS),
        hangup_after_ms=15000,
    )

    assert dialed.report.bot_utterances == []
    assert dialed.report.server_closed
    assert [u.form for u in twilio.updates(sid)] == [{"Status": ["completed"]}]
    meta = await record_of(bot, sid)
    assert (meta["answered_by"], meta["ended_with"]) == ("machine_end_beep", "bot_hangup")
    assert [e.status for e in timeline(bot, sid) if isinstance(e, CallStatus)] == [
        "initiated",
        "ringing",
        "in-progress",
        "completed",
    ]


# --- status callbacks ------------------------------------------------------------------


async def test_a_call_that_is_never_answered_gets_a_record_of_its_statuses(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = outbound_bot(servers, models, twilio)
    call = created(twilio, (await post_calls(bot, {"to": CALLEE})).json()["call_sid"])
    status_url = call.form["StatusCallback"][0]

    for status in ("initiated", "ringing", "no-answer"):
        params = callback_params(call, CallStatus=status)
        assert (await post_callback(status_url, params, AUTH_TOKEN)).status_code == 204

    meta = await record_of(bot, call.sid)
    assert (meta["ended_with"], meta["direction"]) == ("no-answer", "outbound")
    statuses = [e.status for e in timeline(bot, call.sid) if isinstance(e, CallStatus)]
    assert statuses == ["initiated", "ringing", "no-answer"]


@pytest.mark.parametrize("path", ["/twilio/call-status", "/twilio/amd"])
async def test_status_and_amd_callbacks_must_be_signed(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio, path: str
) -> None:
    bot = outbound_bot(servers, models, twilio)
    call = FakeCall("CA" + "1" * 32, CALLEE, CALLER_ID, "ringing", "outbound-api")
    params = callback_params(call, CallStatus="ringing", AnsweredBy="human")

    forged = await post_callback(f"{bot.url}{path}", params, "not-the-auth-token")
    signed = await post_callback(f"{bot.url}{path}", params, AUTH_TOKEN)

    assert (forged.status_code, signed.status_code) == (403, 204)


async def test_the_new_routes_read_bounded_input_and_refuse_the_malformed(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    """Like every webhook (app/webhook.py): 4xx from the headers or the form, never a
    500; `POST /calls` checks its bearer token before it reads a byte of the body."""
    bot = outbound_bot(servers, models, twilio)
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    async with httpx.AsyncClient(timeout=30) as client:
        calls = f"{bot.url}/calls"
        as_form = await client.post(calls, data={"to": CALLEE}, headers=auth)
        assert as_form.status_code == 415
        not_json = {**auth, "Content-Type": "application/json"}
        assert (await client.post(calls, content=b"{to", headers=not_json)).status_code == 400
        big = json.dumps({"to": CALLEE, "greeting": "x" * 5000})
        assert (await client.post(calls, content=big, headers=not_json)).status_code == 413
        unauthorized = await client.post(calls, content=big, headers={"Authorization": "x"})
        assert unauthorized.status_code == 401
        for path in ("/twilio/call-status", "/twilio/amd"):
            url = f"{bot.url}{path}"
            multipart = await client.post(url, files={"f": b"x"})
            assert multipart.status_code == 415
    assert twilio.creates() == []

    call = FakeCall("CA" + "1" * 32, CALLEE, CALLER_ID, "ringing", "outbound-api")
    for path, extra in (
        ("/twilio/call-status", {"CallSid": "CA-not-a-sid", "CallStatus": "ringing"}),
        ("/twilio/call-status", {"CallStatus": "exploded"}),
        ("/twilio/amd", {"CallSid": "nope", "AnsweredBy": "human"}),
    ):
        params = callback_params(call, **extra)
        answer = await post_callback(f"{bot.url}{path}", params, AUTH_TOKEN)
        assert answer.status_code == 400, (path, extra, answer.text)
    other = callback_params(call, CallStatus="ringing", AccountSid="AC" + "f" * 32)
    answer = await post_callback(f"{bot.url}/twilio/call-status", other, AUTH_TOKEN)
    assert answer.status_code == 403
