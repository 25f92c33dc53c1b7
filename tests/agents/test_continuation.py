"""The answered turn and the caller's pauses: when speech after an answer goes on with
the answered turn, and how long the bot waits from then on."""

from __future__ import annotations

from agents.turns.config import TurnTaking
from agents.turns.continuation import Continuation
from agents.turns.judge import Said
from agents.turns.protocol import Evaluation, Frame, Hearing
from callevents import CallEvent, PatienceRaised

RATE = 16000
MS = RATE // 1000


def _continuation() -> tuple[Continuation, list[CallEvent]]:
    events: list[CallEvent] = []
    return Continuation(TurnTaking(), events.append), events


def _heard(text: str, end_ms: int) -> Evaluation:
    return Evaluation(end=end_ms * MS, probability=0.1, text=text, hearing=Hearing.HEARD)


def _bot_frame(end_ms: int) -> Frame:
    return Frame(end=end_ms * MS, samples=20 * MS, events=[], level_db=-20.0,
                 noise_floor_db=-60.0, echo_settled=True, bot_audible=True,
                 bot_level_db=-18.0)  # fmt: skip


def _answered_at(c: Continuation, end_ms: int, at_ms: int) -> None:
    c.answer(Said(end=end_ms * MS), at=at_ms * MS)


def test_going_on_right_after_the_answer_teaches_the_pause() -> None:
    c, events = _continuation()
    _answered_at(c, end_ms=2000, at_ms=2900)  # answered 900 ms into their pause
    c.reopened(onset=3200 * MS)  # ...and they went on 1.2 s after stopping
    assert events == [PatienceRaised(pause_ms=1200, wait_ms=1450)]
    assert c.patience_ms == 1450
    assert c.answered is None


def test_prompting_a_slow_reply_is_no_pause_of_theirs() -> None:
    c, events = _continuation()
    _answered_at(c, end_ms=2000, at_ms=2200)
    c.reopened(onset=3800 * MS)  # 1.6 s after the answer: a caller asking "hello?"
    assert events == [] and c.patience_ms == 0


def test_a_short_pause_changes_nothing() -> None:
    c, events = _continuation()
    _answered_at(c, end_ms=2000, at_ms=2250)
    c.reopened(onset=2300 * MS)  # 300 ms: a comma's pause, under a statement's wait
    assert events == [] and c.patience_ms == 0


def test_speech_soon_into_the_reply_goes_on_the_answered_turn_and_teaches_its_pause() -> None:
    c, events = _continuation()
    _answered_at(c, end_ms=2000, at_ms=2700)
    for _ in range(20):  # 400 ms of the reply heard
        c.bot_heard(20 * MS)
    c.speech_over_bot(onset=3400 * MS, recent=[_bot_frame(3400)])
    c.took_floor(onset=3400 * MS)
    c.judged(_heard("because it is my birthday", 4000))
    assert events == [PatienceRaised(pause_ms=1400, wait_ms=1500)]  # capped at the max


def test_a_new_turn_carries_no_pause() -> None:
    c, events = _continuation()
    _answered_at(c, end_ms=2000, at_ms=2700)
    c.speech_over_bot(onset=3400 * MS, recent=[_bot_frame(3400)])
    c.took_floor(onset=3400 * MS)
    c.new_turn()
    c.judged(_heard("because it is my birthday", 4000))
    assert events == [] and c.patience_ms == 0


def test_an_early_correction_is_a_turn_of_its_own() -> None:
    c, events = _continuation()
    _answered_at(c, end_ms=2000, at_ms=2700)
    c.speech_over_bot(onset=3000 * MS, recent=[_bot_frame(3000)])
    c.took_floor(onset=3000 * MS)
    c.judged(_heard("No, not Saturday.", 3600))
    assert events == [] and c.patience_ms == 0


def test_speech_after_a_second_of_reply_answers_the_reply() -> None:
    c, events = _continuation()
    _answered_at(c, end_ms=2000, at_ms=2300)
    for _ in range(60):  # 1.2 s of reply heard
        c.bot_heard(20 * MS)
    c.speech_over_bot(onset=3600 * MS, recent=[_bot_frame(3600)])
    c.took_floor(onset=3600 * MS)
    c.judged(_heard("That sounds good.", 4200))
    assert events == [] and c.patience_ms == 0
