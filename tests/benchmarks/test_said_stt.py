"""`bench turns --hear-said`: the bot hears, through its own hosted-STT client, exactly
the words its caller had said by then, and no word before all of it was said."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from agents.cascade.hosted_stt import HostedTranscriber
from agents.cascade.stt import Hearing, assess
from benchmarks.turns.recordings import Clip, Heard, Recordings
from benchmarks.turns.said_stt import WordsSaid, said_stt_app
from benchmarks.turns.script import Said
from ops.local_server import ServerThread, free_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# A turn: four words in its first second, a pause, then one more word.
TURN = (Said(0, 1000, "I would like"), Said(1600, 2000, "tea."))


def test_a_word_is_heard_once_all_of_it_is_in_the_audio() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started(TURN, after_s=0.0)

    clock.now = 100.5  # "I" ends at 100.33, "would" at 100.67
    assert words.heard(0.8) == "I"
    clock.now = 101.3  # in the pause
    assert words.heard(1.6) == "I would like"
    clock.now = 102.1
    assert words.heard(2.4) == "I would like tea."


def test_only_the_words_inside_the_audio_are_heard() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started(TURN, after_s=0.0)
    clock.now = 102.1

    # Audio from 101.5 on: after the first three words, the last one alone.
    assert words.heard(0.6) == "tea."
    assert words.heard(0.0) == ""


def test_a_pause_inside_the_audio_counts_as_the_bots_stt_hears_it() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started(TURN, after_s=0.0)
    clock.now = 102.1

    # 1 s of speech, the 600 ms pause cut to 300 ms (agents/turns/audio.py), 400 ms of
    # speech, and the 100 ms pause at the end whole: 1.8 s of audio from 100.0 on.
    assert words.heard(1.8) == "I would like tea."
    assert words.heard(1.4) == "would like tea."


def test_a_new_call_forgets_the_last_ones_words() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started(TURN, after_s=0.0)
    clock.now = 103.0
    words.new_call()

    assert words.heard(5.0) == ""


def test_a_turn_is_placed_when_its_first_frame_reaches_the_line() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started((Said(0, 300, "Yes."),))  # a frame from now, by default

    # Its end reaches the line at 100.32, and is heard a frame's slack before that.
    clock.now = 100.29
    assert words.heard(1.0) == ""
    clock.now = 100.31
    assert words.heard(1.0) == "Yes."


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[WordsSaid, HostedTranscriber]]:
    words = WordsSaid()
    servers = ServerThread()
    try:
        url = servers.serve(said_stt_app(words), free_port())
        transcriber = HostedTranscriber(url, model="words-said")
        yield words, transcriber
        transcriber.close()
    finally:
        servers.close()


def test_the_bots_hosted_stt_client_hears_the_words_said(
    served: tuple[WordsSaid, HostedTranscriber],
) -> None:
    words, transcriber = served
    words.new_call()
    words.turn_started((Said(0, 900, "Is the shop open"),), after_s=-1.0)

    transcript = transcriber.transcribe(np.zeros(2 * 16000, np.float32))

    assert transcript.text == "Is the shop open"
    assert assess(transcript, speech_ms=900) is Hearing.HEARD


def test_audio_with_no_words_said_in_it_is_heard_as_nothing(
    served: tuple[WordsSaid, HostedTranscriber],
) -> None:
    words, transcriber = served
    words.new_call()
    words.turn_started((Said(0, 500, "Hello."),), after_s=-5.0)

    transcript = transcriber.transcribe(np.zeros(16000, np.float32))

    assert transcript.text == ""
    assert assess(transcript, speech_ms=0) is Hearing.NOTHING


def test_the_two_clips_of_a_paused_recorded_turn_share_its_words_in_order() -> None:
    said = "It was the best of times it was the worst of times"
    recordings = Recordings(hear=lambda clip: Heard(said))
    splittable = [u for u in recordings.utterances if u.split_points()]
    assert splittable
    for utterance in splittable:
        whole = utterance.clip
        at = utterance.split_points()[0]
        first = recordings.words_of(Clip(whole.recording, whole.start_ms, at))
        rest = recordings.words_of(Clip(whole.recording, at, whole.end_ms))
        assert first and rest
        assert f"{first} {rest}" == said
    assert recordings.words_of(Clip("beckett.wav", -2000, -1000)) == ""
