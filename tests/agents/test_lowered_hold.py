"""A hold that lowers the bot (HOLD_DUCK_DB): quiet under a listener's noise, silent
under someone who goes on talking, on the engine's sample clock.

The caller asks a question, the bot answers with 4 s of reply, and 3 s in the caller
speaks over it. Speech detection reports a stop 100 ms after the speech's end.
"""

from __future__ import annotations

from itertools import pairwise

from agents.turns.engine import (
    Answer,
    Clear,
    Hearing,
    Hold,
    Lower,
    Resume,
    Silence,
    TurnTaking,
)
from tests.agents.turn_script import Hears, Outcome, Quiet, Say, run

QUESTION = "What time do you open tomorrow?"
OVER_BOT_MS = 3000  # the caller's onset over the reply
LOWERED = TurnTaking(hold_duck_db=20.0, lowered_hold_ms=200)


def _over_the_reply(speech_ms: int, words: str, config: TurnTaking = LOWERED) -> Outcome:
    return run(
        [Say(1500), Quiet(1500), Say(speech_ms)],
        [
            Hears(1600, QUESTION, probability=0.6),
            Hears(99_000, words, probability=0.1 if len(words) < 8 else 0.8),
        ],
        config=config,
    )


def _longest_gap(out: Outcome, lo_ms: int, hi_ms: int) -> int:
    """The longest stretch in [lo_ms, hi_ms) in which the caller heard no bot at all."""
    assert out.bot_audible_ms is not None
    heard = sorted(ms for ms in out.bot_audible_ms if lo_ms <= ms < hi_ms)
    edges = [lo_ms - 20, *heard, hi_ms]
    return max(b - a - 20 for a, b in pairwise(edges))


def test_a_hum_shorter_than_the_lowered_hold_is_never_a_silence() -> None:
    out = _over_the_reply(160, "Mhm.")
    assert out.of(Hold) and out.of(Resume), out.decisions
    assert not out.of(Silence) and not out.of(Clear), out.decisions
    assert _longest_gap(out, OVER_BOT_MS, OVER_BOT_MS + 1000) == 0


def test_a_longer_hum_silences_the_bot_until_it_ends_then_it_goes_on_lowered() -> None:
    out = _over_the_reply(400, "Mhm.")
    [silenced], [lowered] = out.at(Silence), out.at(Lower)
    assert OVER_BOT_MS + 180 <= silenced <= OVER_BOT_MS + 200, out.decisions
    # Lowered again as speech detection reports the stop, then judged and resumed.
    assert lowered <= OVER_BOT_MS + 400 + 100, out.decisions
    assert out.at(Resume) and out.at(Resume)[0] > lowered
    assert not out.of(Clear)
    # The silence the caller heard: from 200 ms into their hum to just after it.
    assert _longest_gap(out, OVER_BOT_MS, OVER_BOT_MS + 1500) <= 320


def test_a_real_interruption_of_a_lowered_bot_is_silent_within_250_ms_of_its_onset() -> None:
    out = _over_the_reply(2000, "No wait, actually I meant Saturday.")
    assert out.of(Silence) and out.of(Clear) and not out.of(Lower), out.decisions
    assert not out.of(Resume)
    # The bot, lowered from the hold, is heard for the first 200 ms of the caller's words.
    assert out.heard_bot_between(OVER_BOT_MS, OVER_BOT_MS + 2000) <= 220
    assert [a.text for a in out.of(Answer)][-1] == "No wait, actually I meant Saturday."


def test_with_no_limit_the_bot_stays_lowered_until_the_words_are_judged() -> None:
    config = TurnTaking(hold_duck_db=20.0, lowered_hold_ms=0)
    out = _over_the_reply(400, "Mhm.", config)
    assert out.of(Resume) and not out.of(Silence), out.decisions
    assert _longest_gap(out, OVER_BOT_MS, OVER_BOT_MS + 1500) == 0


def test_a_stopping_hold_is_never_silenced_or_lowered() -> None:
    out = _over_the_reply(2000, "No wait, actually I meant Saturday.", TurnTaking())
    assert out.of(Hold) and out.of(Clear), out.decisions
    assert not out.of(Silence) and not out.of(Lower)


def test_a_hum_heard_as_nothing_lowers_the_silenced_bot_and_resumes_it() -> None:
    out = run(
        [Say(1500), Quiet(1500), Say(400)],
        [
            Hears(1600, QUESTION, probability=0.6),
            Hears(99_000, "", probability=0.1, hearing=Hearing.NOTHING),
        ],
        config=LOWERED,
    )
    assert out.of(Silence) and out.of(Lower) and out.of(Resume), out.decisions
    assert not out.of(Clear)


def test_a_caller_who_goes_on_after_being_lowered_under_is_not_lowered_under_again() -> None:
    # "I don't | understand | why": the bot came back, lowered, in each gap between words.
    out = run(
        [Say(1500), Quiet(1500), Say(400), Quiet(200), Say(300), Quiet(200), Say(300)],
        [
            Hears(1600, QUESTION, probability=0.6),
            Hears(3500, "", probability=0.1, hearing=Hearing.NOTHING),  # no words yet
            Hears(99_000, "I don't understand why.", probability=0.8),
        ],
        config=LOWERED,
    )
    assert len(out.of(Lower)) == 1, out.decisions
    assert len(out.of(Silence)) == 2, out.decisions
    assert out.of(Clear) and not out.of(Resume), out.decisions
    # Until it was cleared: lowered under the first 200 ms, and in the first gap only.
    cleared = out.at(Clear)[0]
    assert out.heard_bot_between(OVER_BOT_MS, cleared) <= 200 + 300


def _going_on_after(pause_ms: int) -> Outcome:
    """A caller answered 200 ms into their pause goes on over the reply `pause_ms` after
    they stopped, for 400 ms: the rest of their sentence, or a word to the reply."""
    return run(
        [Say(1500), Quiet(pause_ms), Say(400)],
        [
            Hears(1600, "I would like to go", probability=0.6),
            Hears(99_000, "to the library.", probability=0.1),
        ],
        config=LOWERED,
    )


def test_speech_right_after_the_answered_pause_is_not_played_into_when_it_stops() -> None:
    # 1.1 s after the caller stopped, 0.5 s into the reply: it may be their sentence
    # going on, and a caller finishing a sentence pauses again. The bot stays silent
    # until the words are judged.
    out = _going_on_after(1100)
    assert out.of(Hold) and out.of(Silence), out.decisions
    assert not out.of(Lower), out.decisions
    silenced = out.at(Silence)[0]
    judged = (out.at(Resume) or out.at(Clear))[0]
    assert out.heard_bot_between(silenced + 20, judged) == 0


def test_the_same_speech_well_after_the_answered_pause_is_played_into_lowered() -> None:
    # 2 s after the caller stopped: past the window in which it could go on their turn.
    out = _going_on_after(2000)
    assert out.of(Silence) and out.of(Lower), out.decisions


QUIET_LOWERS = TurnTaking(hold_duck_db=20.0, lowered_hold_ms=200, lowered_again_quiet_ms=60)


def test_a_silenced_bot_comes_back_lowered_once_the_caller_is_quiet() -> None:
    # Not 100 ms into the quiet, when this script's speech detection calls the hum
    # over: 60 ms in.
    out = _over_the_reply(400, "Mhm.", QUIET_LOWERS)
    [lowered] = out.at(Lower)
    assert lowered < OVER_BOT_MS + 400 + 60, out.decisions
    assert out.at(Resume) and not out.of(Clear), out.decisions
    waited = _longest_gap(_over_the_reply(400, "Mhm."), OVER_BOT_MS, OVER_BOT_MS + 1500)
    quick = _longest_gap(out, OVER_BOT_MS, OVER_BOT_MS + 1500)
    assert quick <= waited - 40, (quick, waited)


def test_a_quiet_shorter_than_the_setting_inside_the_words_does_not_lower_the_bot() -> None:
    # "O | kay": a 40 ms closure inside the word, after the bot was silenced.
    out = run(
        [Say(1500), Quiet(1500), Say(260), Quiet(40), Say(200)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "Okay.", probability=0.1)],
        config=QUIET_LOWERS,
    )
    [silenced], [lowered] = out.at(Silence), out.at(Lower)
    assert lowered > OVER_BOT_MS + 500, out.decisions  # after the word, not in it
    assert out.heard_bot_between(silenced + 20, OVER_BOT_MS + 500) == 0


def test_a_caller_quiet_and_then_loud_again_silences_the_bot_for_good() -> None:
    # "I don't | understand | why": lowered in the first gap only, as with speech
    # detection's stop, and silenced again as they go on.
    out = run(
        [Say(1500), Quiet(1500), Say(400), Quiet(200), Say(300), Quiet(200), Say(300)],
        [
            Hears(1600, QUESTION, probability=0.6),
            Hears(3500, "", probability=0.1, hearing=Hearing.NOTHING),
            Hears(99_000, "I don't understand why.", probability=0.8),
        ],
        config=QUIET_LOWERS,
    )
    assert len(out.of(Lower)) == 1 and len(out.of(Silence)) == 2, out.decisions
    assert out.of(Clear) and not out.of(Resume), out.decisions


def test_speech_right_after_the_answered_pause_is_not_played_into_when_it_falls_quiet() -> None:
    out = run(
        [Say(1500), Quiet(1100), Say(400)],
        [
            Hears(1600, "I would like to go", probability=0.6),
            Hears(99_000, "to the library.", probability=0.1),
        ],
        config=QUIET_LOWERS,
    )
    assert out.of(Hold) and out.of(Silence) and not out.of(Lower), out.decisions
