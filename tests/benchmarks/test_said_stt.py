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


# A turn: three words in its first second, a pause, then one more word.
TURN = (Said(0, 1000, "I would like"), Said(1600, 2000, "tea."))


def said_at_100() -> tuple[Clock, WordsSaid]:
    """TURN, said from 100.0 on."""
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started(TURN, after_s=0.0)
    return clock, words


def test_a_word_is_heard_once_its_middle_is_in_the_audio() -> None:
    clock, words = said_at_100()

    clock.now = 100.45  # still talking: "I" has its middle at 100.17, "would" at 100.5
    assert words.heard(0.8) == "I"
    clock.now = 101.3  # in the pause
    assert words.heard(1.3) == "I would like"
    clock.now = 102.3
    assert words.heard(2.0) == "I would like tea."


def test_the_audio_ends_where_the_caller_stopped_not_when_it_is_sent() -> None:
    clock, words = said_at_100()
    clock.now = 101.5  # 500 ms into the pause: the bot sends the speech up to its stop

    assert words.heard(1.0) == "I would like"


def test_only_the_words_inside_the_audio_are_heard() -> None:
    clock, words = said_at_100()
    clock.now = 102.3

    assert words.heard(0.4) == "tea."
    assert words.heard(0.0) == ""


def test_a_pause_inside_the_audio_counts_as_the_bots_stt_hears_it() -> None:
    clock, words = said_at_100()
    clock.now = 102.3

    # 1 s of speech, the 600 ms pause cut to 300 ms (agents/turns/audio.py) and 400 ms
    # of speech: 1.7 s of audio from 100.0 on.
    assert words.heard(1.7) == "I would like tea."
    assert words.heard(1.3) == "would like tea."


def test_a_turn_heard_in_pieces_has_each_word_in_one_piece() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started((Said(0, 2000, "one two three four"),), after_s=0.0)

    clock.now = 101.0  # judged while still talking, then the rest after it
    first = words.heard(1.3)
    clock.now = 102.2
    rest = words.heard(1.0)

    assert (first, rest) == ("one two", "three four")


def test_audio_never_reaches_back_into_an_earlier_turn() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started((Said(0, 500, "Hello there."),), after_s=0.0)
    clock.now = 103.0
    words.turn_started((Said(0, 1000, "Book a table."),), after_s=0.0)
    clock.now = 104.2

    # More audio than the turn and its preroll: the noise before it, not the last turn.
    assert words.heard(2.0) == "Book a table."


def test_audio_sent_long_after_the_caller_stopped_has_no_words_in_it() -> None:
    clock, words = said_at_100()
    clock.now = 105.0  # the bot's echo, taken for speech

    assert words.heard(0.8) == ""


def test_a_new_call_forgets_the_last_ones_words() -> None:
    clock, words = said_at_100()
    clock.now = 102.3
    words.new_call()

    assert words.heard(2.0) == ""


def test_a_turn_is_placed_when_its_first_frame_reaches_the_line() -> None:
    clock = Clock()
    words = WordsSaid(clock)
    words.turn_started((Said(0, 300, "Yes."),))  # a frame from now, by default: 100.02

    clock.now = 100.16  # the word's middle: 100.17 (100.15 placed from now)
    assert words.heard(0.2) == ""
    clock.now = 100.18
    assert words.heard(0.2) == "Yes."


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


def test_a_readers_pauses_inside_a_clip_are_pauses_of_the_turn() -> None:
    said = "It was the best of times it was the worst of times"
    recordings = Recordings(hear=lambda clip: Heard(said))
    paused = [u for u in recordings.utterances if any(b - a > 300 for a, b in u.inner_pauses)]
    assert paused
    for utterance in paused:
        runs = recordings.speech_in(utterance.clip)
        # One run between each two of the reader's pauses, the words in order.
        assert len(runs) == len(utterance.inner_pauses) + 1
        assert " ".join(text for _, _, text in runs if text) == said
        for (_, end, _), (start, _, _), (a, b) in zip(
            runs[:-1], runs[1:], utterance.inner_pauses, strict=True
        ):
            assert (end, start) == (a, b)
