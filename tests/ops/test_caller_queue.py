"""The simulated caller's turns gated on Twilio's buffer (`queued_min_ms`,
`queued_max_ms`) and the turns meant for over a reply (`over_bot_only`): what
`python -m benchmarks turns` relies on to backchannel and interrupt at the right moment."""

from __future__ import annotations

import numpy as np
import pytest

from ops.simulate import (
    After,
    BotEar,
    CallerScript,
    CallerTurn,
    PreparedTurn,
    turn_results,
)

# --- the simulator: turns held back by Twilio's buffer --------------------------------------

FRAME = 160


def _run(turn: CallerTurn, queue: list[int], patience_ms: float = 10_000) -> list[int]:
    """Bot speaks from 0; queue[i]: unplayed samples at tick i. Returns turn starts."""
    script = CallerScript(
        [PreparedTurn(turn, np.full(800, 1000, np.int16))], patience_ms=patience_ms
    )
    ear = BotEar()
    starts: list[int] = []
    for tick, queued in enumerate(queue):
        now = tick * FRAME
        script.advance(now, ear, queued)
        if script.speaking(now) == 0 and not starts:
            starts.append(now)
        ear.hear(np.full(FRAME, 3000, np.int16), now)
    return starts


def test_a_turn_waits_until_twilio_holds_enough_of_the_reply() -> None:
    turn = CallerTurn(text="mhm", after=After.BOT_SPEAKING, delay_ms=200, queued_min_ms=3000)
    queue = [8000] * 5 + [16000] * 20 + [30000] * 20  # 1 s, then 2 s, then 3.75 s queued

    assert _run(turn, queue) == [25 * FRAME]


def test_a_turn_waits_until_the_reply_is_nearly_over() -> None:
    turn = CallerTurn(
        text="wait",
        after=After.BOT_SPEAKING,
        delay_ms=200,
        queued_min_ms=1000,
        queued_max_ms=2000,
    )
    queue = [40000 - 160 * tick for tick in range(240)]  # 5 s queued, draining

    [start] = _run(turn, queue)

    assert 8000 <= queue[start // FRAME] <= 16000
    assert queue[start // FRAME - 1] > 16000  # the first tick it fitted


def test_a_held_back_turn_speaks_anyway_once_out_of_patience() -> None:
    turn = CallerTurn(text="mhm", after=After.START, delay_ms=0, queued_min_ms=3000)

    assert _run(turn, [0] * 100, patience_ms=1000) == [50 * FRAME]


def test_an_ungated_turn_ignores_the_queue() -> None:
    turn = CallerTurn(text="hi", after=After.START, delay_ms=100)

    assert _run(turn, [0] * 20) == [5 * FRAME]


def test_queue_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="queued_min_ms <= queued_max_ms"):
        CallerTurn(text="x", queued_min_ms=2000, queued_max_ms=1000)
    with pytest.raises(ValueError, match=">= 0"):
        CallerTurn(text="x", queued_min_ms=-1)


def test_turn_results_carry_what_twilio_still_held_at_each_turn() -> None:
    script = CallerScript(
        [PreparedTurn(CallerTurn(text="a", after=After.START, delay_ms=0), np.ones(800, np.int16))],
        patience_ms=1000,
    )
    for tick in range(10):
        script.advance(tick * FRAME, BotEar())

    [with_queue] = turn_results(script, [], {0: 12000})
    [without] = turn_results(script, [])

    assert with_queue.bot_queued_ms == 1500.0
    assert without.bot_queued_ms is None


# --- the simulator: a turn meant for over a reply that ended first ---------------------------


def _run_script(
    turns: list[CallerTurn], bot_ticks: int, queue_while_bot: int, ticks: int
) -> CallerScript:
    """The bot is heard for its first `bot_ticks` 20 ms ticks with `queue_while_bot`
    unplayed samples, then falls silent with nothing queued; returns the script."""
    script = CallerScript(
        [PreparedTurn(t, np.full(800, 1000, np.int16)) for t in turns], patience_ms=10_000
    )
    ear = BotEar()
    for tick in range(ticks):
        now = tick * FRAME
        bot = tick < bot_ticks
        script.advance(now, ear, queue_while_bot if bot else 0)
        ear.hear(np.full(FRAME, 3000 if bot else 0, np.int16), now)
    return script


def test_a_mhm_for_a_reply_that_ended_first_is_left_unsaid_and_the_caller_goes_on() -> None:
    mhm = CallerTurn(
        text="mhm", after=After.BOT_SPEAKING, delay_ms=200, queued_min_ms=3000, over_bot_only=True
    )
    question = CallerTurn(text="next", after=After.BOT_DONE, delay_ms=600)
    # A 1 s reply that never had 3 s queued: over before the mhm could go over it.
    script = _run_script([mhm, question], bot_ticks=50, queue_while_bot=4000, ticks=400)

    assert script.unsaid == {0}
    (dropped, _, _), (asked, _, _) = script.spans
    # Dropped once the reply was 2 s over; the question follows it, not 10 s of patience.
    assert dropped == (50 + 100) * FRAME
    assert asked == dropped

    [left, said] = turn_results(script, [(0.0, 1000.0)])
    assert left.said is False and left.bot_reply_start_ms is None
    assert said.said is True


def test_without_over_bot_only_a_held_back_turn_still_waits_out_its_patience() -> None:
    mhm = CallerTurn(text="mhm", after=After.BOT_SPEAKING, delay_ms=200, queued_min_ms=3000)
    script = _run_script([mhm], bot_ticks=50, queue_while_bot=4000, ticks=600)

    assert script.unsaid == set()
    [(start, _, _)] = script.spans
    assert start == 500 * FRAME  # 10 s after the call began (nothing said before it)
