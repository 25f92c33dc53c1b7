"""Turn taking end to end: a real server, a Twilio-protocol caller, what the caller hears.

Interruptions stop the bot at once, a backchannel does not cost the caller the rest of
the reply, a pause mid-sentence is not answered, speech that cannot be made out is asked
for again, and a goodbye gets a goodbye. Times are the simulator's, at the caller's ear.
"""

from __future__ import annotations

import numpy as np
import pytest

from agents.cascade.agent import DEFAULT_FAREWELL, DEFAULT_REPROMPT, CascadeModels
from agents.conversation import Speaker
from agents.loading import load_models
from ops.caller_voice import CallerVoice, speak
from ops.local_server import ServerThread
from ops.simulate import CallerTurn, CallReport
from tests.conftest import (
    AUTH_TOKEN,
    GREETING,
    INTERRUPTION,
    ONE_REPLY_GAP_MS,
    Bot,
    finished_record,
    greeting_ms,
    place_call,
    recorded_turns,
    start_bot,
)
from tests.conftest import (
    test_settings as settings_for_tests,
)

pytestmark = pytest.mark.timeout(240)


async def bot_lines(bot: Bot, report: CallReport) -> list[str]:
    turns = await recorded_turns(bot, report.call_sid)
    return [t.text for t in turns if t.speaker is Speaker.BOT]


async def test_an_interruption_stops_the_bot_within_a_fraction_of_a_second(bot: Bot) -> None:
    report = await place_call(bot, INTERRUPTION, hangup_after_ms=3000)

    onset = report.turns[0].speech_start_ms
    assert report.clears, "no clear was sent when the caller barged in"
    # What the caller heard of the bot after starting to speak: the target is
    # 250 ms at p50 (`python -m benchmarks turns`); a loaded test machine gets some slack.
    heard_until = max(end for start, end in report.bot_utterances if start < onset)
    assert heard_until - onset < 600, f"the bot played on {heard_until - onset:.0f} ms"
    greeting = (await recorded_turns(bot, report.call_sid))[0]
    assert greeting.truncated and GREETING.startswith(greeting.text.rstrip(".,!? "))


async def backchannel_over_the_greeting(bot: Bot) -> CallReport:
    """An "okay" 1.5 s into the greeting: the greeting is heard whole and not answered."""
    report = await place_call(
        bot,
        CallerTurn(text="Okay.", after="bot_speaking", delay_ms=1500),
        hangup_after_ms=3000,
    )
    greeting = (await recorded_turns(bot, report.call_sid))[0]
    assert greeting.text == GREETING and not greeting.truncated
    assert len(await bot_lines(bot, report)) == 1, "a backchannel is not a turn to answer"
    return report


async def test_a_backchannel_costs_the_caller_nothing_of_the_reply(bot: Bot) -> None:
    report = await backchannel_over_the_greeting(bot)

    # The bot may pause while the caller hums, then goes on: everything is heard.
    heard_ms = sum(end - start for start, end in report.bot_spans(ONE_REPLY_GAP_MS))
    assert heard_ms >= greeting_ms(bot) - 300, (heard_ms, greeting_ms(bot))


async def test_a_pause_in_the_middle_of_a_sentence_is_not_answered(bot: Bot) -> None:
    first = speak("I would like to book a table for")
    rest = speak("four people on Friday evening, please.")
    audio = np.concatenate([first, np.zeros(8000, np.int16), rest])  # a 1 s pause
    report = await place_call(bot, CallerTurn(audio=audio), hangup_after_ms=6000)

    turn = report.turns[0]
    pause_start = turn.speech_start_ms + len(first) / 8
    spoken_over = [s for s, _ in report.bot_utterances if pause_start <= s < turn.speech_end_ms]
    assert spoken_over == [], "the bot answered into the caller's pause"
    assert turn.latency_ms is not None, "the finished sentence got no answer"
    callers = [
        t for t in (await recorded_turns(bot, report.call_sid)) if t.speaker is Speaker.CALLER
    ]
    assert len(callers) == 1, [t.text for t in callers]


async def test_speech_that_cannot_be_made_out_is_asked_for_again(bot: Bot) -> None:
    # Spanish to an English Whisper: speech to the ear and to speech detection, but no
    # words it can trust (measured through the front end at six alignments: mean token
    # log-probability -1.83 to -1.89, the limit -1.5; no-speech probability <= 0.48).
    spanish = CallerVoice("espeak", 165, "es").speak(
        "Hola, quisiera reservar una mesa para cuatro personas."
    )
    report = await place_call(bot, CallerTurn(audio=spanish), hangup_after_ms=5000)

    assert report.turns[0].latency_ms is not None, "the caller was left in silence"
    assert (await bot_lines(bot, report))[-1] == DEFAULT_REPROMPT


async def test_a_goodbye_is_heard_and_answered_with_a_goodbye(bot: Bot) -> None:
    report = await place_call(bot, CallerTurn(text="Thank you, bye!"), hangup_after_ms=5000)

    assert report.turns[0].latency_ms is not None, "the goodbye got no answer"
    turns = await recorded_turns(bot, report.call_sid)
    callers = [t.text for t in turns if t.speaker is Speaker.CALLER]
    assert callers and "bye" in callers[0].lower()
    assert (await bot_lines(bot, report))[-1] == DEFAULT_FAREWELL


# --- a bot lowered under the caller's words (HOLD_DUCK_DB) -------------------------------


@pytest.fixture(scope="module")
def ducking_bot(servers: ServerThread, models: CascadeModels) -> Bot:
    # No echo canceller on these clean lines: while one learns a line (its first ~2 s), a
    # hold waits for 600 ms of speech, longer than an "okay", and nothing is lowered.
    return start_bot(
        servers, models, twilio_auth_token=AUTH_TOKEN, hold_duck_db=20.0, echo_cancellation=False
    )


async def test_a_ducking_bot_goes_on_quietly_under_a_backchannel(ducking_bot: Bot) -> None:
    report = await backchannel_over_the_greeting(ducking_bot)

    turn = report.turns[0]
    held = [c for c in report.clears if turn.speech_start_ms <= c <= turn.speech_end_ms + 1000]
    assert held, "the bot was not held"
    # Lowered, and silenced at most while the "okay" goes on past 200 ms: the caller
    # never hears the greeting stop for long (a stopped bot pauses ~0.8-1 s), and it
    # takes no longer to hear than its length, that silence and the moment replayed.
    # Silence is what the caller hears nothing in: the lowered greeting's quietest
    # frames fall under the utterances' voiced level, and gaps between utterances
    # measured 420-520 ms around one 420 ms silence.
    first_heard, last_heard = report.bot_utterances[0][0], report.bot_utterances[-1][1]
    silence = report.longest_silence_ms(first_heard, last_heard)
    assert silence < 500, (silence, report.bot_utterances)
    heard_for = report.bot_utterances[-1][1] - report.bot_utterances[0][0]
    assert heard_for <= greeting_ms(ducking_bot) + 600, (heard_for, greeting_ms(ducking_bot))


async def test_a_ducking_bot_is_silenced_by_a_real_interruption(ducking_bot: Bot) -> None:
    report = await place_call(ducking_bot, INTERRUPTION, hangup_after_ms=3000)

    onset = report.turns[0].speech_start_ms
    # At full level no longer than a stopping bot plays (its hold comes at 600 ms of
    # speech while the echo canceller is still learning the line, as here at times).
    full = report.bot_full_level_spans()
    heard_until = max(end for start, end in full if start < onset)
    assert heard_until - onset < 750, f"full level for {heard_until - onset:.0f} ms"
    # Lowered, then silent 200 ms into the caller's words: long before the interruption
    # is judged by its length (1 s).
    quiet_until = max(end for start, end in report.bot_utterances if start < onset)
    assert heard_until <= quiet_until < onset + 400, (onset, heard_until, quiet_until)
    greeting = (await recorded_turns(ducking_bot, report.call_sid))[0]
    assert greeting.truncated


# --- a bot without a words judge (TURN_JUDGE=voice) ---------------------------------------


@pytest.fixture(scope="module")
def voice_bot(servers: ServerThread) -> Bot:
    settings = settings_for_tests(turn_judge="voice")
    models = servers.run(load_models(settings, servers.stack), timeout=600)
    return start_bot(servers, models, twilio_auth_token=AUTH_TOKEN, turn_judge="voice")


def test_smart_turn_is_loaded_only_by_a_bot_whose_judge_weighs_it(bot: Bot, voice_bot: Bot) -> None:
    # The default judge reads the words; its shipped weights give Smart Turn none.
    assert bot.services.models is not None and bot.services.models.end_of_turn is None
    assert voice_bot.services.models is not None
    assert voice_bot.services.models.words_judge is None
    assert voice_bot.services.models.end_of_turn is not None


@pytest.mark.slow  # loads its own models
async def test_a_bot_without_a_words_judge_answers_on_smart_turn_and_the_silence(
    voice_bot: Bot,
) -> None:
    report = await place_call(
        voice_bot,
        CallerTurn(text="Can you tell me when the library opens tomorrow?", after="bot_done"),
        hangup_after_ms=6000,
    )

    assert report.turns[0].latency_ms is not None, "the question got no answer"
    record = await finished_record(voice_bot, report.call_sid)
    assert record.meta["versions"]["models"]["end_of_turn"] == "smart-turn-v3.2"
    [decision, *_] = [e for e in record.timeline() if e["event"] == "end_of_turn"]
    assert decision["probability"] is not None and decision["words"] is None
