"""`python -m benchmarks turns`: the metric arithmetic on synthetic calls (no server) and
the scripts as data. The simulator's queue-gated caller turns the scripts rely on are
tested with the simulator (tests/ops/test_caller_queue.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from benchmarks.turns import (
    EXPECTS_ANSWER,
    SCRIPTS,
    Gap,
    Kind,
    Tally,
    TurnFacts,
    compose,
    read_aloud,
    score_call,
    score_unplaced,
    table_rows,
)
from ops.simulate import CallReport, TurnResult

Span = tuple[float, float]


def _report(
    turns: Sequence[Span],
    utterances: Sequence[Span],
    clears: list[float] | None = None,
    underruns: int = 0,
) -> CallReport:
    return CallReport(
        call_sid="CAtest",
        stream_sid="MZtest",
        twiml="<Response/>",
        turns=[TurnResult("t", s, e, None, None) for s, e in turns],
        bot_utterances=list(utterances),
        clears=clears or [],
        underruns=underruns,
        underrun_ms=20.0 * underruns,
    )


Q = TurnFacts(Kind.QUESTION, "What time do you close?")
BC = TurnFacts(Kind.BACKCHANNEL, "Mhm.")
INTERRUPT = TurnFacts(Kind.INTERRUPTION, "No wait, Saturday", where="mid")


# --- turn answered, mouth to mouth, dead air ------------------------------------------------


def test_a_reply_after_the_last_sample_answers_the_turn_with_its_latency() -> None:
    tally, [score] = score_call([Q], _report([(1000, 2000)], [(0, 800), (2600, 4000)]))

    assert score.answered and score.latency_ms == 600
    assert tally.answered == tally.expect_answer == 1
    assert tally.latencies_ms == [600]
    assert not score.dead_air and tally.talk_over == 0


def test_no_reply_before_the_next_turn_is_unanswered_and_dead_air() -> None:
    # The bot answers the first question only once the second has begun.
    tally, scores = score_call([Q, Q], _report([(1000, 2000), (6000, 7000)], [(6500, 8000)]))

    assert scores[0].answered is False and scores[0].dead_air is True
    assert scores[1].answered is False  # 6500 is inside it: talk-over, not an answer
    assert scores[1].talk_over_onsets == [6500]
    assert tally.answered == 0 and tally.expect_answer == 2
    # After the second the bot is still talking: not dead air, just not an answer.
    assert scores[1].dead_air is False and tally.dead_air_turns == 1


def test_the_last_turn_has_a_five_second_window() -> None:
    _, [late] = score_call([Q], _report([(1000, 2000)], [(7100, 8000)]))
    _, [in_time] = score_call([Q], _report([(1000, 2000)], [(6900, 8000)]))

    assert late.answered is False
    assert in_time.answered is True and in_time.latency_ms == 4900
    assert in_time.dead_air is True  # answered, but after more than 2 s of silence


def test_a_caller_who_speaks_again_within_2_s_leaves_no_dead_air() -> None:
    tally, scores = score_call([Q, Q], _report([(1000, 2000), (3500, 4500)], [(5000, 6000)]))

    assert scores[0].dead_air is False and scores[0].answered is False
    assert tally.dead_air_turns == 0


def test_a_turn_the_call_never_got_to_counts_as_unanswered() -> None:
    tally, scores = score_call([Q, BC, Q], _report([(1000, 2000)], [(2500, 3000)]))

    assert [s.said for s in scores] == [True, False, False]
    assert tally.expect_answer == 2 and tally.answered == 1
    assert tally.backchannels == 1 and tally.backchannels_judged == 0

    failed, _ = score_unplaced([Q, INTERRUPT])
    assert failed.failed_calls == 1 and failed.expect_answer == 2 and failed.answered == 0
    assert failed.interruptions == 1 and failed.tails_ms == []


def test_a_silence_over_2_s_inside_a_reply_is_dead_air_but_not_the_callers_time() -> None:
    facts = [Q, BC, Q]
    turns = [(0, 1000), (3000, 3400), (12000, 13000)]
    # Reply 1 stops for 2.5 s (no caller turn in it, only a backchannel), then goes on;
    # the silence before the next question is the caller's floor, not dead air.
    utterances = [(1600, 2000), (2500, 3000), (5500, 9000), (13500, 15000)]

    tally, _ = score_call(facts, _report(turns, utterances))

    assert tally.dead_air_in_replies == 1
    assert tally.dead_air_turns == 0


def test_underruns_and_protocol_violations_come_from_the_report() -> None:
    report = _report([(1000, 2000)], [(2500, 3000)], underruns=3)
    report.protocol_violations.append("binary_frame")

    tally, _ = score_call([Q], report)

    assert tally.underruns == 3 and tally.underrun_ms == 60.0
    assert tally.protocol_violations == 1


# --- talk-over, cut-offs, readings ----------------------------------------------------------


def test_an_onset_in_a_callers_scripted_pause_is_talk_over_and_a_cut_off() -> None:
    pause = TurnFacts(Kind.PAUSE, "a table for … four", pauses_ms=((1000.0, 2000.0),))

    tally, [score] = score_call([pause], _report([(500, 3500)], [(2000, 2600), (4000, 5000)]))

    # Pause 1500-2500 on the call clock; the bot began at 2000, inside it.
    assert score.talk_over_onsets == [2000]
    assert score.cut_off is True and score.cut_off_inside_pause is True
    assert tally.talk_over == 1 and tally.cut_offs == 1 and tally.pause_turns == 1
    assert score.answered is True  # it also answered once the sentence was over


def test_an_onset_after_the_caller_resumed_is_still_a_cut_off_in_that_pause() -> None:
    pause = TurnFacts(Kind.PAUSE, "a table for … four", pauses_ms=((1000.0, 2000.0),))

    _, [score] = score_call([pause], _report([(500, 3500)], [(2800, 4500)]))

    assert score.cut_off is True and score.cut_off_inside_pause is False
    assert score.answered is False  # that reply began before the turn's end


def test_a_pause_turn_waited_for_is_not_cut_off() -> None:
    pause = TurnFacts(Kind.PAUSE, "a table for … four", pauses_ms=((1000.0, 2000.0),))
    before = (0.0, 400.0)  # the greeting, over before the caller began

    tally, [score] = score_call([pause], _report([(500, 3500)], [before, (4100, 5000)]))

    assert score.cut_off is False and tally.cut_offs == 0 and tally.talk_over == 0
    assert score.latency_ms == 600


def test_a_reading_is_heard_whole_only_with_no_bot_audio_inside_it() -> None:
    reading = TurnFacts(Kind.READING, "my whole order")
    _, [whole] = score_call([reading], _report([(1000, 40000)], [(0, 600), (40700, 42000)]))
    _, [cut] = score_call([reading], _report([(1000, 40000)], [(20000, 20500), (40700, 42000)]))

    assert whole.heard_whole is True and whole.talk_over_onsets == []
    assert cut.heard_whole is False and cut.talk_over_onsets == [20000]


# --- backchannels ---------------------------------------------------------------------------


def test_a_bot_that_pauses_for_a_backchannel_and_goes_on_is_not_a_false_stop() -> None:
    # The reply pauses 600 ms around the "mhm", with a clear, then continues.
    report = _report([(0, 1000), (4500, 5000)], [(1600, 5000), (5600, 12000)], clears=[4900])

    tally, [_, score] = score_call([Q, BC], report)

    assert score.judged is True and score.false_stop is False
    assert score.backchannel_pause_ms == 600
    assert tally.false_stops == 0 and tally.backchannel_pauses_ms == [600]
    assert tally.talk_over == 0


def test_a_reply_that_talks_through_the_backchannel_pauses_for_0_ms() -> None:
    _, [_, score] = score_call([Q, BC], _report([(0, 1000), (4500, 5000)], [(1600, 12000)]))

    assert score.false_stop is False and score.backchannel_pause_ms == 0


def test_a_reply_that_does_not_come_back_within_1_5_s_is_a_false_stop() -> None:
    report = _report([(0, 1000), (4500, 5000)], [(1600, 4800), (6600, 9000)], clears=[4800])

    tally, [_, score] = score_call([Q, BC], report)

    assert score.false_stop is True and tally.false_stops == 1
    assert score.backchannel_pause_ms is None


def test_a_late_clear_with_nothing_after_it_is_a_false_stop() -> None:
    # Audio goes on past the backchannel, then a clear at 6000 and silence: stopped.
    report = _report([(0, 1000), (4500, 5000)], [(1600, 6000), (9000, 10000)], clears=[6000])

    _, [_, score] = score_call([Q, BC], report)

    assert score.false_stop is True


def test_a_backchannel_over_silence_is_not_judged() -> None:
    tally, [_, score] = score_call([Q, BC], _report([(0, 1000), (4500, 5000)], [(1600, 4000)]))

    assert score.judged is False and score.false_stop is None
    assert tally.backchannels == 1 and tally.backchannels_judged == 0


# --- interruptions --------------------------------------------------------------------------


def test_bot_audio_after_an_interruption_is_measured_from_its_onset() -> None:
    # Reply 1600-3700 (a 200 ms gap inside it is still one utterance), caller in at
    # 3500, answer to the correction after it ends.
    report = _report([(0, 1000), (3500, 6500)], [(1600, 3700), (7200, 9000)])

    tally, [_, score] = score_call([Q, INTERRUPT], report)

    assert score.judged is True and score.tail_ms == 200
    assert tally.tails_ms == [200] and tally.interruptions == 1
    assert score.answered is True and score.latency_ms == 700
    assert tally.dead_air_in_replies == 0  # the silence is the caller's correction


def test_a_bot_that_talks_on_over_the_interruption_has_a_long_tail() -> None:
    _, [_, score] = score_call([Q, INTERRUPT], _report([(0, 1000), (3500, 6500)], [(1600, 9000)]))

    assert score.tail_ms == 5500 and score.answered is False


def test_an_interruption_over_silence_is_not_judged() -> None:
    tally, [_, score] = score_call(
        [Q, INTERRUPT], _report([(0, 1000), (3500, 6500)], [(1600, 3000)])
    )

    assert score.judged is False and score.tail_ms is None and tally.tails_ms == []


# --- a bot lowered under the caller (HOLD_DUCK_DB) ----------------------------------------


def _bot_audio(*segments: tuple[float, float | None]) -> np.ndarray:
    """Bot audio at the ear: (ms, dBFS) segments of a 300 Hz tone, None for silence."""
    parts = []
    for ms, dbfs in segments:
        t = np.arange(int(ms * 8)) / 8000
        amplitude = 0.0 if dbfs is None else 32768 * 10 ** (dbfs / 20) * np.sqrt(2)
        parts.append(amplitude * np.sin(2 * np.pi * 300 * t))
    return np.concatenate(parts).astype(np.int16)


def _lowered_report(turns: Sequence[Span], *segments: tuple[float, float | None]) -> CallReport:
    report = _report(turns, [])
    report.bot_audio = _bot_audio(*segments)
    full_level = report.bot_full_level_spans(below_db=100.0)  # every audible frame
    report.bot_utterances = full_level
    return report


def test_a_lowered_bot_playing_on_in_an_interrupting_callers_pause_is_talk_over_apart() -> None:
    # The reply at full level, lowered at the interruption (4500), silenced at 4700, back
    # lowered in the caller's pause at 5200, silenced again at 5400; the answer at 6300.
    report = _lowered_report(
        [(0, 1000), (4500, 6000)],
        (1600, None),
        (2900, -20),
        (200, -40),
        (500, None),
        (200, -40),
        (900, None),
        (1000, -20),
    )

    tally, [_, score] = score_call([Q, INTERRUPT], report)

    assert score.talk_over_onsets == [5200] and score.talk_over_lowered == 1
    assert tally.talk_over == 1 and tally.talk_over_lowered == 1
    rows = {r.measure: r.result for r in table_rows(tally, clean=True, concurrent=1)}
    assert rows["of it, a held bot playing on lowered (informative)"] == "1"


def test_a_reply_starting_inside_the_callers_turn_is_talk_over_at_full_level() -> None:
    report = _lowered_report([(0, 3000)], (2000, None), (600, -20), (1000, None))

    tally, [score] = score_call([Q], report)

    assert score.talk_over_onsets == [2000] and score.talk_over_lowered == 0
    assert tally.talk_over == 1 and tally.talk_over_lowered == 0


def test_the_bot_at_full_level_leaves_out_where_it_was_lowered_and_where_it_was_silent() -> None:
    report = CallReport(call_sid="CA", stream_sid="MZ", twiml="")
    report.bot_audio = _bot_audio((1000, -20), (600, -40), (1000, -20), (500, None), (400, -22))
    assert report.bot_full_level_spans() == [(0, 1000), (1600, 2600), (3100, 3500)]
    assert report.bot_full_level_spans(below_db=30) == [(0, 2600), (3100, 3500)]


def test_a_reply_lowered_under_a_backchannel_has_no_pause_and_is_lowered_that_long() -> None:
    # Full level to 4600, lowered to 5400 (under "mhm" at 4500-5000), then full again.
    report = _lowered_report(
        [(0, 1000), (4500, 5000)], (1600, None), (3000, -20), (800, -40), (3000, -20)
    )

    tally, [_, score] = score_call([Q, BC], report)

    assert score.false_stop is False and score.backchannel_pause_ms == 0
    assert score.backchannel_lowered_ms == 800
    assert tally.backchannel_lowered_ms == [800]


def test_a_reply_that_stops_for_a_backchannel_is_under_full_level_for_its_pause() -> None:
    report = _lowered_report(
        [(0, 1000), (4500, 5000)], (1600, None), (3000, -20), (600, None), (3000, -20)
    )

    _, [_, score] = score_call([Q, BC], report)

    assert score.backchannel_pause_ms == 600 and score.backchannel_lowered_ms == 600


def test_the_silence_after_a_reply_that_ends_is_not_time_under_full_level() -> None:
    # The reply ends at full level at 5600, after the "mhm" (4500-5000); the next at 9000.
    report = _lowered_report(
        [(0, 1000), (4500, 5000)], (1600, None), (4000, -20), (3400, None), (1000, -20)
    )

    _, [_, score] = score_call([Q, BC], report)

    assert score.backchannel_lowered_ms == 0


def test_a_reply_that_ends_lowered_is_under_full_level_to_its_end() -> None:
    report = _lowered_report(
        [(0, 1000), (4500, 5000)], (1600, None), (3000, -20), (1000, -40), (3000, None)
    )

    _, [_, score] = score_call([Q, BC], report)

    assert score.backchannel_lowered_ms == 1000


def test_bot_audio_after_an_interruption_at_full_level_ends_where_it_was_lowered() -> None:
    # Full level to 3700, lowered to 4500, then cleared; the caller came in at 3500.
    report = _lowered_report([(0, 1000), (3500, 6500)], (1600, None), (2100, -20), (800, -40))

    tally, [_, score] = score_call([Q, INTERRUPT], report)

    assert score.tail_ms == 1000 and score.tail_full_ms == 200
    assert tally.tails_full_ms == [200]


# --- targets --------------------------------------------------------------------------------


def _verdicts(tally: Tally, *, clean: bool = True, concurrent: int = 1) -> dict[str, str]:
    return {r.measure: r.verdict for r in table_rows(tally, clean=clean, concurrent=concurrent)}


def test_targets_pass_and_fail_at_their_thresholds() -> None:
    good = Tally(
        calls=1,
        expect_answer=50,
        answered=49,
        pause_turns=20,
        cut_offs=1,
        backchannels=20,
        backchannels_judged=20,
        false_stops=1,
        tails_ms=[200, 250, 300],
        latencies_ms=[600, 700, 650, 900],
    )
    verdicts = _verdicts(good)
    assert verdicts["turns answered"] == "PASS"  # 98.0 %
    assert verdicts["cut-offs in pauses"] == "PASS"  # 5 %
    assert verdicts["false stops on backchannels"] == "PASS"
    assert verdicts["bot audio after an interruption, p50"] == "PASS"  # 250 ms
    assert verdicts["bot audio after an interruption, p90"] == "PASS"  # 290 ms
    assert verdicts["mouth to mouth, p50"] == "PASS"
    assert verdicts["talk-over (bot onsets over the caller)"] == "PASS"
    assert verdicts["readings heard whole"] == "-"  # none read: nothing to judge

    bad = Tally(
        calls=1,
        failed_calls=1,
        expect_answer=50,
        answered=48,
        talk_over=1,
        pause_turns=10,
        cut_offs=1,
        readings=2,
        readings_whole=1,
        dead_air_in_replies=1,
        underruns=2,
        tails_ms=[500],
        latencies_ms=[1200, 1300],
    )
    verdicts = _verdicts(bad)
    assert {
        verdicts[m]
        for m in (
            "turns answered",
            "talk-over (bot onsets over the caller)",
            "cut-offs in pauses",
            "readings heard whole",
            "dead air over 2 s",
            "underruns (dry 20 ms ticks)",
            "bot audio after an interruption, p50",
            "mouth to mouth, p50",
            "mouth to mouth, p90",
            "calls failed",
        )
    } == {"FAIL"}


def test_mouth_to_mouth_is_judged_on_the_clean_line_with_the_concurrent_target() -> None:
    tally = Tally(calls=4, expect_answer=4, answered=4, latencies_ms=[900, 1000, 1200, 1400])

    assert _verdicts(tally)["mouth to mouth, p90"] == "FAIL"  # > 1 s, one call
    assert _verdicts(tally, clean=False)["mouth to mouth, p90"] == "-"
    concurrent = _verdicts(tally, concurrent=4)
    assert concurrent["mouth to mouth, p90"] == "PASS"  # <= 1.5 s, four at once
    assert concurrent["mouth to mouth, p50"] == "-"


def test_tallies_add_up() -> None:
    a = Tally(calls=1, answered=2, latencies_ms=[1.0], underrun_ms=20.0)
    a.add(Tally(calls=1, answered=3, latencies_ms=[2.0], underrun_ms=40.0))

    assert (a.calls, a.answered, a.latencies_ms, a.underrun_ms) == (2, 5, [1.0, 2.0], 60.0)


# --- the scripts ----------------------------------------------------------------------------


def test_compose_puts_exact_pauses_where_the_facts_say() -> None:
    rng = np.random.default_rng(1)
    speech = {"one": np.full(800, 1000, np.int16), "two": np.full(1600, 1000, np.int16)}

    audio, pauses, _ = compose(("one", 500, "two", Gap(200, 300), "one"), speech.__getitem__, rng)

    assert pauses == ((100.0, 600.0),)  # natural gaps are not scripted pauses
    assert not audio[800:4800].any() and audio[4800:6400].all()
    assert 800 + 4000 + 1600 + 1600 + 800 <= audio.size <= 800 + 4000 + 1600 + 2400 + 800


def test_compose_says_a_sentence_paused_in_the_middle_as_one_when_it_can() -> None:
    rng = np.random.default_rng(1)
    speech = {"one": np.full(800, 1000, np.int16), "two": np.full(1600, 1000, np.int16)}
    asked: list[tuple[str, int, str]] = []

    def speak_paused(first: str, pause_ms: int, rest: str) -> tuple[np.ndarray, int, int]:
        asked.append((first, pause_ms, rest))
        # One sentence: the voice's pause comes out 30 ms longer than asked.
        said = [speech[first], np.zeros(8 * (pause_ms + 30), np.int16), speech[rest]]
        return np.concatenate(said), 800, 800 + 8 * (pause_ms + 30)

    audio, pauses, said = compose(
        ("two", "one", 500, "two", 300), speech.__getitem__, rng, speak_paused=speak_paused
    )

    assert asked == [("one", 500, "two")]
    assert pauses == ((300.0, 830.0), (1030.0, 1330.0))  # the voice's pause, as it came out
    assert [(s.start_ms, s.end_ms, s.text) for s in said] == [
        (0.0, 200.0, "two"),
        (200.0, 300.0, "one"),
        (830.0, 1030.0, "two"),
    ]
    assert audio.size == 1600 + 800 + 8 * 530 + 1600 + 2400


def test_read_aloud_pauses_between_sentences_and_at_commas() -> None:
    parts = read_aloud("First, two pizzas. Then bread.")

    assert parts == ("First,", Gap(200, 350), "two pizzas.", Gap(500, 800), "Then bread.")


def test_the_scripts_cover_what_the_issue_asks_for() -> None:
    turns = [say for script in SCRIPTS for say in script.turns]
    kinds = {say.kind for say in turns}
    assert kinds == set(Kind)
    pauses = [p for say in turns if say.kind is Kind.PAUSE for p in say.parts if isinstance(p, int)]
    assert {500, 1000, 1500} <= set(pauses) and all(500 <= p <= 1500 for p in pauses)
    assert {say.where for say in turns if say.kind is Kind.INTERRUPTION} == {"early", "mid", "late"}
    assert {s.parts[0] for s in turns if s.kind is Kind.BACKCHANNEL} == {
        "Mhm.",
        "Okay.",
        "Right.",
        "Yeah.",
        "Uh-huh.",
    }
    readers = {s.voice for s in SCRIPTS if any(t.kind is Kind.READING for t in s.turns)}
    assert {v.engine for v in readers} == {"espeak", "piper"}
    assert len({v.rate_wpm for v in readers}) == 2
    assert any(len(say.text.split()) <= 2 for say in turns if say.kind is Kind.QUESTION)
    assert Kind.BACKCHANNEL not in EXPECTS_ANSWER
    assert len({s.name for s in SCRIPTS}) == len(SCRIPTS)


def test_bench_turns_is_registered_and_refuses_an_unknown_script() -> None:
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit, match="no script matches"):
        main(["turns", "--only", "no-such-script", "--lines", "clean"])
    # An operator's names are drawn from the corpus calls, for the server started here.
    with pytest.raises(SystemExit, match="--operator-names"):
        main(["turns", "--operator-names", "--lines", "clean"])
    with pytest.raises(SystemExit, match="--operator-names"):
        main(["turns", "--corpus", "2", "--operator-names", "--url", "http://127.0.0.1:9"])
    with pytest.raises(SystemExit, match="--operator-names"):
        main(["turns", "--corpus", "2", "--operator-names", "--hear-said"])


# --- a turn the caller left unsaid --------------------------------------------------------


def test_a_turn_left_unsaid_is_neither_owed_an_answer_nor_judged() -> None:
    report = _report([(1000, 2000), (5000, 5000), (9000, 10000)], [(2500, 4000), (10500, 11000)])
    report.turns[1] = TurnResult("t", 5000, 5000, None, None, said=False)

    tally, scores = score_call([Q, INTERRUPT, Q], report)

    assert [s.said for s in scores] == [True, False, True]
    assert tally.expect_answer == 2 and tally.answered == 2
    assert tally.interruptions == 1 and tally.tails_ms == []
    # The caller's silence before the next question is their own floor, not dead air.
    assert tally.dead_air_in_replies == 0


def test_a_backchannel_costs_the_caller_its_stop_or_a_pause_over_300_ms() -> None:
    def costly(false_stops: int, pauses_ms: list[float]) -> str:
        tally = Tally(
            calls=1,
            backchannels=20,
            backchannels_judged=20,
            false_stops=false_stops,
            backchannel_pauses_ms=pauses_ms,
        )
        rows = table_rows(tally, clean=True, concurrent=1)
        [row] = [r for r in rows if r.measure.startswith("backchannels costing")]
        return f"{row.result} {row.verdict}"

    # Going on without a pause, or pausing for no more than 300 ms, costs nothing.
    assert costly(0, [0.0] * 10 + [300.0] * 10) == "0/20 (0.0 %) PASS"
    # One reply stopped: within the 5 % allowed. One more pause over 300 ms: past it.
    assert costly(1, [0.0] * 19) == "1/20 (5.0 %) PASS"
    assert costly(1, [0.0] * 18 + [301.0]) == "2/20 (10.0 %) FAIL"
