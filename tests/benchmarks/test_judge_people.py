"""Where `judge-people` asks the judges: the reader's own pauses inside a sentence, long
enough to be answered into, and each turn's end."""

from __future__ import annotations

from benchmarks.judge_people import moments
from benchmarks.turns.recordings import Clip, Utterance


def _turn(text: str, *pauses: tuple[int, int]) -> Utterance:
    return Utterance(Clip("two_cities.wav", 1000, 5000), pauses, text)


def test_a_sentence_is_asked_at_its_readers_long_pauses_and_at_its_end() -> None:
    turn = _turn(
        "It was the best of times, it was the worst of times.",
        (2000, 2400),  # a comma's pause: asked, 400 ms long
        (3000, 3100),  # a gap between words, shorter than any wait: not asked
        (1100, 1400),  # too near the turn's start to have speech before it
        (4800, 4950),  # ...and too near its end
    )
    found = moments([turn], shortest_pause_ms=200)
    assert [(m.upto_ms, m.pause_ms, m.final) for m in found] == [
        (2000, 400.0, False),
        (5000, 0.0, True),
    ]


def test_a_turn_of_several_sentences_is_asked_only_at_its_end() -> None:
    # Its pauses may be where a sentence ended: answering there cuts nobody off.
    turn = _turn("Ever tried. Ever failed.", (2000, 2400))
    assert [(m.upto_ms, m.final) for m in moments([turn], shortest_pause_ms=200)] == [(5000, True)]
