"""End to end: a real server on 127.0.0.1, a Twilio-protocol caller with generated speech.

Each test places a real call with `ops.simulate` (the same client operators use), then
checks what the caller heard — transcribing the bot's audio with the same Whisper model
the bot uses — and what the bot believes was said.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from agents.cascade.agent import CascadeModels
from agents.cascade.llm import OpenAIChat
from agents.conversation import Speaker
from media.resample import resample
from ops.line import LineConditions
from ops.simulate import CallerTurn
from tests.conftest import (
    AUTH_TOKEN,
    Bot,
    ServerThread,
    finished_record,
    place_call,
    recorded_turns,
    start_bot,
)

pytestmark = pytest.mark.timeout(240)


def transcribe(models: CascadeModels, audio_8k: np.ndarray) -> str:
    audio = resample(audio_8k.astype(np.float32) / 32768.0, 8000, 16000)
    return models.stt.transcribe(audio).text.lower()


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


call = place_call


async def test_the_greeting_plays_when_the_call_starts(bot: Bot, models: CascadeModels) -> None:
    report = await call(bot, hangup_after_ms=9000)

    assert report.greeting_start_ms is not None
    assert report.greeting_start_ms < 1500, "the caller waited too long for a hello"
    start, end = report.bot_utterances[0]
    heard = transcribe(models, report.bot_audio_between(start, end))
    assert {"thanks", "calling"} <= words(heard) or {"help", "today"} <= words(heard), heard
    assert report.underrun_ms == 0, "the greeting was choppy"


async def test_a_spoken_question_gets_a_spoken_answer_on_topic(
    bot: Bot, models: CascadeModels
) -> None:
    report = await call(
        bot,
        CallerTurn(text="What is the weather usually like in London?", after="bot_done"),
        # What the bot says is under test here, not how soon: on 2 busy cores the LLM
        # can stop for seconds between clauses (docs/benchmarks.md, `llama-beside`).
        hangup_after_ms=12000,
    )

    turn = report.turns[0]
    assert turn.latency_ms is not None, "the bot never answered"
    # All of the reply (Whisper reads up to 30 s): its topic words may come in any clause.
    reply = transcribe(
        models, report.bot_audio_between(turn.bot_reply_start_ms, turn.bot_reply_start_ms + 30000)
    )
    topic = {
        "weather",
        "london",
        "rain",
        "rainy",
        "sunny",
        "cloudy",
        "temperature",
        "climate",
        "warm",
        "cold",
        "mild",
        "wet",
        "summer",
        "winter",
    }
    assert words(reply) & topic, f"off-topic or empty reply: {reply!r}"
    history = await recorded_turns(bot, report.call_sid)
    caller_turns = [t for t in history if t.speaker is Speaker.CALLER]
    assert caller_turns and words(caller_turns[0].text) & {"weather", "london", "whether"}


# Interruptions and backchannels: tests/test_turn_taking_calls.py.


async def test_the_bots_own_echo_does_not_interrupt_it(bot: Bot) -> None:
    report = await call(bot, line=LineConditions(echo_db=20.0), hangup_after_ms=8000)

    assert report.clears == []
    assert not (await recorded_turns(bot, report.call_sid))[0].truncated


async def test_keypad_digits_reach_the_conversation(bot: Bot) -> None:
    report = await call(
        bot, CallerTurn(dtmf="1", after="bot_done", delay_ms=300), hangup_after_ms=6000
    )

    history = await recorded_turns(bot, report.call_sid)
    assert any("pressed 1" in t.text for t in history if t.speaker is Speaker.CALLER)
    bot_turns = [t for t in history if t.speaker is Speaker.BOT]
    assert len(bot_turns) >= 2 and bot_turns[1].text, "the bot did not answer the digit"


async def test_a_dead_language_model_gets_an_apology_and_the_call_goes_on(
    servers: ServerThread, models: CascadeModels
) -> None:
    dead = OpenAIChat(base_url="http://127.0.0.1:9/v1", model="gone", first_token_timeout_s=2.0)
    broken = start_bot(servers, dataclasses.replace(models, llm=dead), twilio_auth_token=AUTH_TOKEN)

    report = await call(
        broken,
        CallerTurn(text="Can you help me with my order?", after="bot_done"),
        hangup_after_ms=5000,
    )

    turn = report.turns[0]
    assert turn.latency_ms is not None, "silence instead of an apology"
    reply = transcribe(
        models, report.bot_audio_between(turn.bot_reply_start_ms, turn.bot_reply_start_ms + 5000)
    )
    assert words(reply) & {"sorry", "trouble"}, reply
    failures = broken.services.metrics.registry.get_sample_value(
        "offhook_errors_total", {"stage": "llm"}
    )
    # Every reply the dead model owed is counted (a turn heard in two pieces owes two).
    record = await finished_record(broken, report.call_sid)
    told = [
        event
        for event in record.timeline()
        if event.get("event") in ("end_of_turn", "reply_start", "error")
    ]
    assert failures is not None and failures >= 1, (failures, told)
    assert not report.server_closed or report.close_code in (None, 1000)
