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


def test_the_answered_turns_audio_is_kept_while_speech_over_the_reply_may_go_on_it() -> None:
    c, _ = _continuation()
    c.answer(Said(end=2000 * MS, start=100 * MS), at=2300 * MS)
    assert c.keeps_from == 100 * MS
    for _ in range(75):  # 1.5 s of reply heard: what is said now answers the reply
        c.bot_heard(20 * MS)
    assert c.keeps_from is None


def test_a_turn_carried_on_over_the_reply_is_given_back_and_its_pause_learnt() -> None:
    c, events = _continuation()
    c.answer(Said(end=2000 * MS, start=100 * MS, speech=1800 * MS), at=2300 * MS)
    c.speech_over_bot(onset=3200 * MS, recent=[_bot_frame(3200)])
    assert c.may_go_on and c.keeps_from == 100 * MS
    said = c.carry_on(onset=3200 * MS)
    assert (said.start, said.speech) == (100 * MS, 1800 * MS)
    assert c.answered is None and not c.may_go_on
    c.judged(_heard("I would like to go to the library", 3600))  # heard whole
    assert events == [PatienceRaised(pause_ms=1200, wait_ms=1450)]


def test_an_answer_forgotten_keeps_nothing_and_nothing_carries_it_on() -> None:
    # A keypad entry answered some other way: speech over the reply then is no longer
    # the answered turn going on.
    c, _ = _continuation()
    c.answer(Said(end=2000 * MS, start=100 * MS), at=2300 * MS)
    c.speech_over_bot(onset=3200 * MS, recent=[_bot_frame(3200)])
    c.forget()
    assert not c.may_go_on and not c.may_carry_on and c.keeps_from is None


def test_words_answered_over_a_replys_end_are_not_carried_on() -> None:
    # Their audio is kept less (the driver's): a caller going on starts a turn of their own.
    c, _ = _continuation()
    c.answer(Said(end=2000 * MS, start=100 * MS, kept=False), at=2300 * MS)
    assert c.keeps_from is None
    c.speech_over_bot(onset=3200 * MS, recent=[_bot_frame(3200)])
    assert c.may_go_on and not c.may_carry_on and c.keeps_from is None


def test_the_audio_is_kept_until_the_onset_of_speech_over_a_second_of_reply_is_known() -> None:
    # Speech detection reports an onset late and dates it back: the reply heard before
    # the onset, not all heard by the report, says whether the window was open.
    c, _ = _continuation()
    c.answer(Said(end=2000 * MS, start=100 * MS), at=2300 * MS)
    for _ in range(55):  # 1.1 s of the reply heard, the last 0.1 s over the speech
        c.bot_heard(20 * MS)
    assert c.keeps_from == 100 * MS
    frames = [_bot_frame(3320 + 20 * i) for i in range(5)]  # from the onset on
    c.speech_over_bot(onset=3300 * MS, recent=frames)
    assert c.may_carry_on and c.keeps_from == 100 * MS
