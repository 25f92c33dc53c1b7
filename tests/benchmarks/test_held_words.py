"""`bench held-words`: how short words over the bot are scored, rule by rule and half by
half (the models' part runs only in the benchmark itself)."""

from __future__ import annotations

from agents.turns.config import TurnTaking
from benchmarks.held_words import Heard, rules, score

CFG = TurnTaking()


def _heard(
    kind: str,
    text: str,
    *,
    half: str = "held-out",
    hearing: str = "heard",
    speech_ms: int = 500,
    words: float | None = 0.5,
) -> Heard:
    return Heard(
        kind=kind,
        said=text,
        voice="en-us",
        rate_wpm=160,
        half=half,
        speech_ms=speech_ms,
        text=text,
        hearing=hearing,
        no_speech_prob=0.2,
        avg_logprob=-0.3,
        words=words,
    )


def test_a_listeners_noise_heard_as_one_lets_the_bot_go_on_under_every_rule() -> None:
    item = _heard("backchannel", "Uh-huh.")
    assert all(goes_on(item) for goes_on in rules(CFG).values())


def test_nothing_heard_lets_the_bot_go_on_under_every_rule() -> None:
    item = _heard("backchannel", "", hearing="unclear", words=None)
    assert all(goes_on(item) for goes_on in rules(CFG).values())


def test_without_the_word_list_any_other_heard_words_stop_the_bot() -> None:
    item = _heard("words", "Cheaper in the spring.")
    assert not rules(CFG)["closed class only"](item)


def test_a_fragment_the_words_judge_finds_unfinished_is_taken_for_a_hum() -> None:
    fragment = _heard("backchannel", "And then", words=0.0001)
    finished = _heard("words", "Cheaper in the spring.", words=0.9)
    asked = _heard("words", "Which one?", words=0.0001)
    goes_on = rules(CFG)["closed class or fragment"]
    assert goes_on(fragment)
    assert not goes_on(finished)
    assert not goes_on(asked), "a question takes the turn, however unfinished it reads"


def test_long_speech_stops_the_bot_whatever_its_words() -> None:
    long = _heard("words", "Okay.", speech_ms=CFG.backchannel_max_ms + 1)
    assert not any(goes_on(long) for goes_on in rules(CFG).values())


def test_each_half_is_scored_apart() -> None:
    items = [
        _heard("backchannel", "Uh-huh.", half="tuning"),
        _heard("backchannel", "Sandwich.", half="held-out"),
        _heard("words", "Cheaper in the spring.", half="held-out"),
    ]
    figures = score(items, CFG)
    assert figures["tuning"]["closed class only"] == {
        "backchannels": 1,
        "backchannels_stopping": 0,
        "words": 0,
        "words_talked_over": 0,
    }
    assert figures["held-out"]["closed class only"] == {
        "backchannels": 1,
        "backchannels_stopping": 1,
        "words": 1,
        "words_talked_over": 0,
    }
