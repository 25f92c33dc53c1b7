"""The bot controls the call, end to end: a real server, the Twilio-protocol caller, and
a fake of Twilio's REST API (tests/fake_twilio.py) where the REST API is used.

The bot ends a call once its goodbye has played (the caller's goodbye, MAX_CALL_S, a
silence after a re-prompt), by closing the stream or, with credentials, over REST too;
it transfers a caller who asks for a person with a <Dial> over REST, and says it cannot
without credentials. Every ending is in the call's record.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.cascade.agent import DEFAULT_FAREWELL, DEFAULT_REPROMPT, CascadeModels
from agents.conversation import Speaker
from callevents import Transfer as TransferEvent
from callevents import parse_timeline
from ops.calls import main as calls_main
from ops.local_server import ServerThread
from ops.simulate import CallerTurn, CallReport
from telephony.twiml import dial_twiml
from tests.conftest import AUTH_TOKEN, Bot, place_call, recorded_turns, start_bot
from tests.fake_twilio import FakeTwilio

pytestmark = pytest.mark.timeout(240)

TRANSFER_TO = "+15557654321"
ANNOUNCEMENT = "Please hold while I transfer you to a person."
CANNOT = "Sorry, I can't transfer you to a person right now."
ASKS_FOR_A_PERSON = "Transfer me to an agent, please."  # espeak, as Whisper hears it


@pytest.fixture
def twilio(servers: ServerThread) -> Iterator[FakeTwilio]:
    fake = FakeTwilio(AUTH_TOKEN)
    fake.serve(servers)
    yield fake


def rest_bot(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio, **overrides: Any
) -> Bot:
    """A bot with REST credentials, talking to the fake Twilio."""
    return start_bot(
        servers,
        models,
        twilio_auth_token=AUTH_TOKEN,
        twilio_account_sid=twilio.account_sid,
        twilio_api_url=twilio.url,
        **overrides,
    )


def new_sid() -> str:
    return "CA" + secrets.token_hex(16)


async def record_of(bot: Bot, call_sid: str) -> dict[str, Any]:
    """The call's meta.json once its record is closed."""
    path = Path(bot.settings.calls_dir) / call_sid / "meta.json"
    for _ in range(100):
        if path.exists():
            meta: dict[str, Any] = json.loads(path.read_text())
            if meta.get("ended_at"):
                return meta
        await asyncio.sleep(0.1)
    raise AssertionError(f"the record of {call_sid} was not closed")


def timeline(bot: Bot, call_sid: str) -> list[Any]:
    lines = (Path(bot.settings.calls_dir) / call_sid / "timeline.jsonl").read_text().splitlines()
    return [event for _, event in parse_timeline(json.loads(line) for line in lines)]


async def bot_lines(bot: Bot, report: CallReport) -> list[str]:
    """What the bot said on the call, as its record has it (the call is over)."""
    turns = await recorded_turns(bot, report.call_sid)
    return [t.text for t in turns if t.speaker is Speaker.BOT]


async def heard_in_full(bot: Bot, report: CallReport, text: str) -> bool:
    turns = await recorded_turns(bot, report.call_sid)
    return any(t.speaker is Speaker.BOT and t.text == text and not t.truncated for t in turns)


# --- ending the call --------------------------------------------------------------------


async def test_a_callers_goodbye_ends_the_call_once_the_bot_goodbye_has_played(
    bot: Bot,
) -> None:
    report = await place_call(bot, CallerTurn(text="Thank you, bye!"), hangup_after_ms=10000)

    assert report.server_closed, "the bot did not end the call"
    assert (await bot_lines(bot, report))[-1] == DEFAULT_FAREWELL
    assert await heard_in_full(bot, report, DEFAULT_FAREWELL)
    goodbye_end = report.bot_utterances[-1][1]
    assert report.closed_ms is not None
    # Closed after the goodbye was heard (marks echoed), and promptly.
    assert goodbye_end <= report.closed_ms < goodbye_end + 1500, (goodbye_end, report.closed_ms)
    meta = await record_of(bot, report.call_sid)
    assert meta["ended_with"] == "bot_hangup"
    assert meta["end_reason"] == "farewell"


async def test_a_caller_who_talks_over_the_goodbye_keeps_the_call(bot: Bot) -> None:
    report = await place_call(
        bot,
        CallerTurn(text="Thank you, bye!"),
        CallerTurn(text="Wait, one more question please.", after="bot_speaking", delay_ms=300),
        hangup_after_ms=4000,
    )

    assert not report.server_closed, "the bot hung up on a caller who had more to say"
    meta = await record_of(bot, report.call_sid)
    assert meta["ended_with"] == "completed"
    turns = await recorded_turns(bot, report.call_sid)
    goodbye = [t for t in turns if t.intended == DEFAULT_FAREWELL]
    assert goodbye and goodbye[0].truncated


async def test_with_rest_credentials_the_call_is_also_completed_over_rest(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = rest_bot(servers, models, twilio)
    sid = new_sid()
    twilio.add_live_call(sid)

    report = await place_call(
        bot,
        CallerTurn(text="Thank you, bye!"),
        hangup_after_ms=10000,
        call_sid=sid,
        account_sid=twilio.account_sid,
    )

    assert report.server_closed
    [update] = twilio.updates(sid)
    assert update.authorized
    assert update.form == {"Status": ["completed"]}
    assert twilio.calls[sid].status == "completed"
    meta = await record_of(bot, sid)
    assert meta["ended_with"] == "bot_hangup"
    ended = [e for e in timeline(bot, sid) if e.name == "call_ended"]
    assert [e.data()["via"] for e in ended] == ["rest"]


async def test_max_call_s_ends_the_call_with_a_goodbye(
    servers: ServerThread, models: CascadeModels
) -> None:
    # The goodbye starts GOODBYE_LEAD_S (10 s) before MAX_CALL_S: at 7 s here, well
    # after the greeting.
    bot = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, max_call_s=17.0)

    # The caller says nothing and would stay on for 40 s.
    report = await place_call(bot, hangup_after_ms=40000, max_call_s=40)

    assert report.server_closed and report.closed_ms is not None
    goodbye_start, goodbye_end = report.bot_utterances[-1]
    assert 7000 <= goodbye_start < 7000 + 1500, report.bot_utterances
    # Ended once the goodbye was heard, before MAX_CALL_S's hard close.
    assert goodbye_end <= report.closed_ms < 17000, (goodbye_end, report.closed_ms)
    assert (await bot_lines(bot, report))[-1] == DEFAULT_FAREWELL
    meta = await record_of(bot, report.call_sid)
    assert (meta["ended_with"], meta["end_reason"]) == ("bot_hangup", "max_duration")


async def test_a_long_silence_after_a_reprompt_ends_the_call(
    servers: ServerThread, models: CascadeModels
) -> None:
    bot = start_bot(
        servers, models, twilio_auth_token=AUTH_TOKEN, greeting="", silence_timeout_s=3.0
    )

    report = await place_call(bot, hangup_after_ms=40000, max_call_s=40)

    assert report.server_closed
    assert await bot_lines(bot, report) == [DEFAULT_REPROMPT, DEFAULT_FAREWELL]
    first, second = report.bot_utterances[0][0], report.bot_utterances[-1][0]
    assert 3000 <= first < 4500, first  # 3 s of silence, then the re-prompt
    reprompt_end = report.bot_utterances[0][1]
    assert second - reprompt_end >= 3000 - 300, (reprompt_end, second)
    meta = await record_of(bot, report.call_sid)
    assert (meta["ended_with"], meta["end_reason"]) == ("bot_hangup", "silence")


# --- transfer -----------------------------------------------------------------------------


async def test_a_caller_who_asks_for_a_person_is_transferred_with_a_dial(
    servers: ServerThread,
    models: CascadeModels,
    twilio: FakeTwilio,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bot = rest_bot(servers, models, twilio, transfer_to=TRANSFER_TO)
    sid = new_sid()
    twilio.add_live_call(sid)

    report = await place_call(
        bot,
        CallerTurn(text=ASKS_FOR_A_PERSON),
        hangup_after_ms=10000,
        call_sid=sid,
        account_sid=twilio.account_sid,
    )

    assert await heard_in_full(bot, report, ANNOUNCEMENT)
    [update] = twilio.updates(sid)
    assert update.authorized
    assert update.form == {"Twiml": [dial_twiml(TRANSFER_TO)]}
    assert twilio.calls[sid].twiml == f"<Response><Dial>{TRANSFER_TO}</Dial></Response>"
    assert report.server_closed
    meta = await record_of(bot, sid)
    assert (meta["ended_with"], meta["transfer_to"]) == ("transferred", TRANSFER_TO)
    transfers = [e for e in timeline(bot, sid) if isinstance(e, TransferEvent)]
    assert [(t.target, t.reason, t.ok) for t in transfers] == [(TRANSFER_TO, "words", True)]
    # `offhook calls show` tells the story.
    assert calls_main(["--data-dir", bot.settings.data_dir, "show", sid]) == 0
    shown = capsys.readouterr().out
    assert f"transferred to {TRANSFER_TO} (words)" in shown
    assert "a person asked for (words)" in shown


async def test_the_transfer_key_transfers_to_a_sip_uri(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    target = "sip:frontdesk@pbx.example.com"
    bot = rest_bot(servers, models, twilio, transfer_to=target, transfer_key="0")
    sid = new_sid()
    twilio.add_live_call(sid)

    await place_call(
        bot,
        CallerTurn(dtmf="0"),
        hangup_after_ms=10000,
        call_sid=sid,
        account_sid=twilio.account_sid,
    )

    [update] = twilio.updates(sid)
    assert update.form == {"Twiml": [f"<Response><Dial><Sip>{target}</Sip></Dial></Response>"]}
    meta = await record_of(bot, sid)
    assert (meta["ended_with"], meta["end_reason"]) == ("transferred", "key")


async def test_without_rest_credentials_a_transfer_is_refused_out_loud(
    servers: ServerThread, models: CascadeModels, caplog: pytest.LogCaptureFixture
) -> None:
    bot = start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, transfer_to=TRANSFER_TO)

    with caplog.at_level(logging.WARNING, logger="app.control"):
        report = await place_call(bot, CallerTurn(text=ASKS_FOR_A_PERSON), hangup_after_ms=4000)

    assert await heard_in_full(bot, report, CANNOT)
    assert not report.server_closed, "the call goes on"
    assert "transfer refused: Twilio REST credentials" in caplog.text
    meta = await record_of(bot, report.call_sid)
    assert meta["ended_with"] == "completed"


async def test_a_transfer_twilio_refuses_is_said_and_the_call_goes_on(
    servers: ServerThread, models: CascadeModels, twilio: FakeTwilio
) -> None:
    bot = rest_bot(servers, models, twilio, transfer_to=TRANSFER_TO)
    # Twilio does not know this call: the update is a 404 (code 20404).
    report = await place_call(
        bot,
        CallerTurn(text=ASKS_FOR_A_PERSON),
        hangup_after_ms=4000,
        account_sid=twilio.account_sid,
    )

    assert len(twilio.updates(report.call_sid)) == 1
    assert (await bot_lines(bot, report))[-2:] == [ANNOUNCEMENT, CANNOT]
    assert not report.server_closed
    await record_of(bot, report.call_sid)
    transfers = [e for e in timeline(bot, report.call_sid) if isinstance(e, TransferEvent)]
    assert [t.ok for t in transfers] == [False] and "20404" in transfers[0].error
