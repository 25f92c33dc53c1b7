"""Speech detection under continuous background voices: the caller's words end where
their voice drops back into the background, and the background alone is never speech.

Callers (espeak) say four questions three seconds apart over six-talker babble, as a
phone line carries both; the front end runs exactly as on a call.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from media.codec import mulaw_encode
from media.frontend import FrontEnd
from media.vad import NoiseFloor, SpeechGate, SpeechStarted, SpeechStopped
from ops.caller_voice import trim_silence
from ops.line import NoiseSource, active_rms

QUESTIONS = (
    "What time does the pharmacy close today?",
    "Can you recommend a good book to read?",
    "How do I reset my password?",
    "Where can I park near the station?",
)
GAP = 3 * 8000


def caller_over_babble(
    speak: Callable[[str], np.ndarray], snr_db: float
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    turns = [trim_silence(np.rint(speak(q) * 32767)).astype(np.float64) for q in QUESTIONS]
    spans, parts, at = [], [np.zeros(GAP)], GAP
    for turn in turns:
        parts += [turn, np.zeros(GAP)]
        spans.append((at, at + turn.size))
        at += turn.size + GAP
    voice = np.concatenate(parts)
    level = active_rms(np.concatenate(turns)) / 10 ** (snr_db / 20)
    babble = NoiseSource("babble", level, seed=5).take(voice.size)
    return np.clip(voice + babble, -32768, 32767).astype(np.int16), spans


def speech_events(line: np.ndarray, gate_db: float) -> list[SpeechStarted | SpeechStopped]:
    front = FrontEnd(min_silence_ms=64, echo_cancel=False, gate_margin_db=gate_db)
    events = []
    for i in range(0, line.size - 159, 160):
        events += front.process(mulaw_encode(line[i : i + 160])).events
    front.close()
    return events


def ends_found(events: list, spans: list[tuple[int, int]]) -> int:
    """Questions whose speech was seen to stop within a second of their last word.

    At 10 dB a quiet last syllable ("...to read?") can sink into the babble, so the
    stop may come up to 600 ms early; what must never happen is no stop at all.
    """
    stops = [e.sample // 2 for e in events if isinstance(e, SpeechStopped)]
    return sum(any(end - 4800 <= s <= end + 8000 for s in stops) for _, end in spans)


def longest_speech_s(events: list) -> float:
    longest, start = 0, None
    for e in events:
        if isinstance(e, SpeechStarted):
            start = e.sample
        elif start is not None:
            longest, start = max(longest, e.sample - start), None
    return longest / 16000


def starts_in_background(events: list, spans: list[tuple[int, int]]) -> int:
    starts = [e.sample // 2 for e in events if isinstance(e, SpeechStarted)]
    return sum(not any(a - 800 <= s <= b + 800 for a, b in spans) for s in starts)


@pytest.mark.parametrize("snr_db", [15, 10])
def test_the_end_of_every_question_is_seen_through_babble(speak, snr_db: float) -> None:
    line, spans = caller_over_babble(speak, snr_db)
    events = speech_events(line, gate_db=5.0)
    assert ends_found(events, spans) == len(QUESTIONS)
    assert starts_in_background(events, spans) == 0


def test_without_the_gate_silero_hears_the_babble_as_one_long_turn(speak) -> None:
    line, spans = caller_over_babble(speak, 10)
    events = speech_events(line, gate_db=0.0)
    assert longest_speech_s(events) > 5  # a question and the 3 s gap after it, at least
    assert starts_in_background(events, spans) > 0  # and babble alone starts "speech"


def test_the_noise_floor_is_the_quiet_end_of_recent_levels() -> None:
    floor = NoiseFloor(windows=10, percentile=20)
    for level in [-40, -40, -20, -20, -20, -20, -20, -20, -40, -40]:
        floor.update(level)
    assert floor.level_db == pytest.approx(-40)
    for _ in range(10):  # the background got louder: the floor follows within the window
        floor.update(-30)
    assert floor.level_db == pytest.approx(-30)


def test_the_gate_holds_for_short_dips_inside_a_word() -> None:
    gate = SpeechGate(margin_db=5, hold=3)
    for _ in range(50):
        gate.apply([0.9], [-50.0])  # background, which Silero calls speech: gated
    assert gate.apply([0.9], [-50.0]) == [0.0]
    loud, dip = -30.0, -50.0
    kept = gate.apply([0.9] * 6, [loud, dip, dip, loud, dip, dip])
    assert kept == [0.9] * 6  # dips of two windows stay inside the word
    assert gate.apply([0.9] * 3, [dip] * 3)[-1] == 0.0  # a third quiet window ends it


def test_a_zero_margin_turns_the_gate_off() -> None:
    gate = SpeechGate(margin_db=0)
    assert gate.apply([0.7, 0.2], [-90.0, -90.0]) == [0.7, 0.2]
