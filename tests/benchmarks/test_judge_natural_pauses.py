"""`bench judge` asks its judges at every pause a call's engine would: the scripted one,
and those the voice makes on its own (between sentences, at a comma), after which the
caller goes on all the same."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agents.turns.config import TurnTaking
from agents.turns.judge import VoiceJudge
from benchmarks.judge import natural_pauses, score, speech_events
from benchmarks.judge_material import Item, speak
from media.vad import SpeechStarted, SpeechStopped, VadEvent
from tests.benchmarks.judge_observations import observation


def test_the_voices_own_pauses_are_found_beside_the_scripted_one() -> None:
    # 16 kHz samples: speech, a 300 ms gap, speech, the scripted pause, speech, the end.
    events: list[VadEvent] = [
        SpeechStarted(sample=0),
        SpeechStopped(sample=16000),
        SpeechStarted(sample=20800),
        SpeechStopped(sample=40000),  # the scripted pause: 8 kHz 20000..28000
        SpeechStarted(sample=56000),
        SpeechStopped(sample=80000),
    ]

    assert natural_pauses(events, 20000, 28000) == [(8000, 300.0)]


def test_a_sentence_end_inside_a_paused_line_is_a_pause_the_caller_goes_on_after() -> None:
    item = Item(
        bot="What can I do for you?",
        caller="My order never came. I would like to know where it is.",
        cut=8,
        pause_s=1.2,
        engine="espeak",
        voice="en-gb-x-rp",
        rate_wpm=150,
        line="clean",
    )
    spoken = speak(item, np.random.default_rng(0))
    ended = np.concatenate([spoken.audio, np.zeros(800, np.int16)])

    found = natural_pauses(speech_events(ended), spoken.pause_start, spoken.pause_end)

    # The full stop after "came" (the scripted pause comes after "to"), in the first
    # sentence's audio, as long as espeak-ng pauses between sentences.
    assert [at for at, _ in found if at < spoken.pause_start], found
    at, gap_ms = found[0]
    assert 0.3 * spoken.pause_start < at < 0.6 * spoken.pause_start
    assert 150 <= gap_ms <= 800


def test_cut_offs_at_the_voices_own_pauses_are_counted_apart() -> None:
    heard = observation(text="My order never came", smart_turn=0.9, words=0.9)
    observations = [
        heard,  # scripted: longer than the voice judge's sure wait
        replace(heard, pause_ms=150.0, natural=True),  # too short to answer into
        replace(heard, pause_ms=400.0, natural=True),
        replace(heard, final=True, pause_ms=0.0),
    ]

    found = score(VoiceJudge(TurnTaking()), observations)

    assert (found.pauses, found.cut_offs) == (3, 2)
    assert (found.natural_pauses, found.natural_cut_offs) == (2, 1)
