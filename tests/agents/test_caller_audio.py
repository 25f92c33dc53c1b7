"""The caller's audio buffer: what the turn's models are given of the caller's speech."""

from __future__ import annotations

import numpy as np

from agents.turns.audio import LONG_PAUSE_KEPT_MS, CallerAudio
from media.vad import SpeechStarted, SpeechStopped

RATE = 16000
KEPT = LONG_PAUSE_KEPT_MS * RATE // 1000


def _ms(ms: int) -> int:
    return ms * RATE // 1000


def _buffer(*runs: tuple[int, int]) -> CallerAudio:
    """Five seconds of audio, each sample its own index (so cuts show), with speech
    detection's events for the given speech runs [start, stop) in ms."""
    audio = CallerAudio(RATE)
    samples = np.arange(_ms(5000), dtype=np.float32)
    for at in range(0, samples.size, _ms(20)):  # fed 20 ms at a time, as a call does
        audio.add(at, samples[at : at + _ms(20)])
    events: list[SpeechStarted | SpeechStopped] = []
    for start, stop in runs:
        events += [SpeechStarted(_ms(start)), SpeechStopped(_ms(stop))]
    audio.speech(events)
    return audio


def test_whisper_hears_a_long_pause_inside_the_speech_as_a_short_one() -> None:
    audio = _buffer((500, 1500), (2700, 3500))
    heard = audio.for_words(_ms(300), _ms(3700))
    pause = _ms(2700) - _ms(1500)
    assert heard.size == _ms(3700) - _ms(300) - pause + KEPT
    # Half the kept pause on each side: the words around it are whole.
    cut_at = _ms(1500) - _ms(300) + KEPT // 2
    assert heard[cut_at - 1] == _ms(1500) + KEPT // 2 - 1
    assert heard[cut_at] == _ms(2700) - (KEPT - KEPT // 2)
    assert heard[-1] == _ms(3700) - 1


def test_a_pause_no_longer_than_a_commas_is_left_alone() -> None:
    audio = _buffer((500, 1500), (1500 + LONG_PAUSE_KEPT_MS, 2500))
    assert np.array_equal(audio.for_words(0, _ms(2600)), audio.slice(0, _ms(2600)))


def test_the_pause_being_judged_is_left_whole() -> None:
    # Speech stopped at 1.5 s and has not started again: that silence may end the turn.
    audio = _buffer((500, 1500))
    assert np.array_equal(audio.for_words(0, _ms(3000)), audio.slice(0, _ms(3000)))


def test_only_pauses_wholly_inside_the_utterance_are_shortened() -> None:
    audio = _buffer((500, 1500), (2700, 3500), (4500, 4900))
    # The utterance starts inside the first pause and ends inside the second.
    assert np.array_equal(audio.for_words(_ms(2000), _ms(4000)), audio.slice(_ms(2000), _ms(4000)))
