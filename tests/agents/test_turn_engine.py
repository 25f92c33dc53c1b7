"""The turn-taking engine, scenario by scenario: who has the turn, on a sample clock.

Each case scripts the caller (speech and quiet, with levels), what the models say of
their words, and the bot's replies; it checks the engine's decisions and when the bot
was audible at the caller's ear. No models, no sleeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from agents.turns.config import FusedWeights
from agents.turns.engine import (
    Answer,
    Clear,
    Evaluate,
    Hearing,
    Hold,
    IllegalTransition,
    Reopen,
    Reprompt,
    Resume,
    TurnEngine,
    TurnState,
    TurnTaking,
)
from agents.turns.judge import FusedJudge
from callevents import Backchannel, EchoIgnored, EndOfTurn, NotSpeech, PatienceRaised, TurnCapped
from tests.agents.turn_script import (
    BOT_DB,
    FLOOR_DB,
    Bot,
    Hears,
    Outcome,
    Quiet,
    Say,
    Segment,
    run,
    run_duplex,
)


@dataclass(frozen=True)
class Case:
    name: str
    script: list[Segment]
    hears: list[Hears]
    check: Callable[[Outcome], None]
    bot: Bot | None = None
    echo_settled: bool = True
    # The duplex backend has no caller levels (the gateway gated them), no echo canceller
    # state, and answers in the same unit it decides: cases about those are the engine's.
    duplex: bool = True
    config: TurnTaking | None = None


def answered_once(text: str, *, after_ms: int, within_ms: int) -> Callable[[Outcome], None]:
    def check(out: Outcome) -> None:
        answers = out.of(Answer)
        assert [a.text for a in answers] == [text], out.decisions
        at = out.at(Answer)[0]
        # (a frame's decision is stamped with the frame's start: 20 ms early)
        assert after_ms - 20 <= at <= after_ms + within_ms, f"answered at {at} ms"

    return check


def never_answered_before(ms: int, text: str) -> Callable[[Outcome], None]:
    def check(out: Outcome) -> None:
        assert all(at >= ms for at in out.at(Answer)), out.decisions
        assert [a.text for a in out.of(Answer)] == [text], out.decisions

    return check


def backchannel_resumes(out: Outcome) -> None:
    assert out.of(Hold), "the bot holds while the caller hums"
    assert out.of(Resume) and not out.of(Clear), out.decisions
    assert any(isinstance(e, Backchannel) for _, e in out.events)
    if out.bot_audible_ms is not None:
        # The rest of the reply is heard: all 4 s of it, less nothing.
        assert len(out.bot_audible_ms) * 20 >= 4000 - 100


def resumes_after(quiet_from_ms: int) -> Callable[[Outcome], None]:
    """The held bot resumes once, a frame or a few after `quiet_from_ms`."""

    def check(out: Outcome) -> None:
        at = out.at(Resume)
        assert at and quiet_from_ms - 20 <= at[0] <= quiet_from_ms + 120, f"{at} {out.decisions}"

    return check


def interruption_stops_fast(onset_ms: int) -> Callable[[Outcome], None]:
    def check(out: Outcome) -> None:
        holds = out.at(Hold)
        assert holds and holds[0] - onset_ms <= 160, f"held at {holds} for onset {onset_ms}"
        assert out.of(Clear), "an interruption clears the rest of the reply"
        # Bot audio the caller heard after their onset: a few frames at most.
        if out.bot_audible_ms is not None:
            answered = next(ms for ms in out.at(Answer) if ms > onset_ms)
            assert out.heard_bot_between(onset_ms, answered) <= 160
        assert out.of(Answer)[-1].text == "No wait, Saturday."

    return check


def patience_raised_once(out: Outcome, *, pause_ms: int) -> bool:
    """The engine learnt the caller's pause once, to a frame or two (the duplex backend
    sees the caller in 200 ms units, its speech windows in 32 ms steps)."""
    raised = [e for _, e in out.events if isinstance(e, PatienceRaised)]
    cfg = TurnTaking()
    return (
        len(raised) == 1
        and abs(raised[0].pause_ms - pause_ms) <= 40
        and raised[0].wait_ms
        == min(raised[0].pause_ms + cfg.patience_margin_ms, cfg.patience_max_ms)
    )


def answered_in_the_pause_then_waited_for(*, pause_ms: int) -> Callable[[Outcome], None]:
    """The words before the pause were answered, the caller cut in and was heard whole,
    and their pause was learnt."""

    def check(out: Outcome) -> None:
        assert [a.text for a in out.of(Answer)] == [TABLE_FOR_YOU, SIX_AT_NOON], out.decisions
        assert out.of(Clear), out.decisions
        assert patience_raised_once(out, pause_ms=pause_ms), out.events

    return check


def answered_as_the_reply_ends(out: Outcome) -> bool:
    """The last answer came the frame after the resumed reply's last audio."""
    assert out.bot_audible_ms is not None
    answered, resumed = out.at(Answer)[-1], out.at(Resume)[-1]
    played = [ms for ms in out.bot_audible_ms if resumed <= ms < answered]
    return answered - max([resumed, *played]) <= 40


TABLE_FOR_YOU = "I'd like to book a table for you."
SIX_AT_NOON = "Six people next Tuesday. At noon, please."
QUESTION = "What time do you open tomorrow?"
CORRECTION_TEXT = "No wait, actually I meant Saturday."
PHARMACY = "Could you check whether the pharmacy on Main Street is open on Sunday?"
BOOKING = "I'd like to book a table for four people on Friday."

CASES = [
    Case(
        "a turn Smart Turn is unsure of is answered after the longer pause",
        [Say(1500)],
        [Hears(10_000, QUESTION, probability=0.2)],
        answered_once(QUESTION, after_ms=1500 + TurnTaking().max_silence_ms, within_ms=150),
    ),
    Case(
        "half a minute read aloud with pauses is heard whole, past the no-pause cap",
        [s for _ in range(6) for s in (Say(4200), Quiet(800))][:-1],
        [
            Hears(29_000, "The order. Then. And the next sentence of the order.", 0.3),
            Hears(99_000, "The order. Then. That is the whole order.", probability=0.3),
        ],
        never_answered_before(
            6 * 4200 + 5 * 800 + TurnTaking().max_silence_ms - 20,
            "The order. Then. That is the whole order.",
        ),
        duplex=False,
    ),
    Case(
        "a sure end-of-turn model answers a short flat answer fast",
        [Say(1000)],
        [Hears(10_000, "Friday evening", probability=0.9)],
        answered_once("Friday evening", after_ms=1000, within_ms=400),
    ),
    *[
        Case(
            f"a {pause} ms pause Smart Turn is unsure of is not answered",
            [Say(1500), Quiet(pause), Say(1200)],
            [
                Hears(1600, "I'd like to book a table for.", probability=0.3),
                Hears(10_000, BOOKING, probability=0.3),
            ],
            never_answered_before(1500 + pause + 1200, BOOKING),
        )
        for pause in (500, 900)
    ],
    Case(
        "a backchannel over a reply holds the bot and then lets it go on",
        [Say(1500), Quiet(1500), Say(400)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "Mhm.", probability=0.1)],
        backchannel_resumes,
    ),
    Case(
        "'okay' over a reply is a backchannel too",
        [Say(1500), Quiet(2000), Say(500)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "Okay.", probability=0.2)],
        backchannel_resumes,
    ),
    Case(
        "a hum Whisper makes words of ('M-A-M', 'and make him') is a backchannel",
        [Say(1500), Quiet(1500), Say(500)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "And make him.", 0.1)],
        backchannel_resumes,
    ),
    Case(
        "a hum the transcript makes nothing of does not cost the reply",
        [Say(1500), Quiet(1500), Say(300)],
        [
            Hears(1600, QUESTION, probability=0.6),
            Hears(99_000, "", probability=0.1, hearing=Hearing.NOTHING),
        ],
        backchannel_resumes,
    ),
    Case(
        "a caller who pauses at a comma after a short word is not resumed into",
        # "No wait, | actually I meant Saturday": the first words came back as a hum's.
        [Say(1500), Quiet(1500), Say(500), Quiet(300), Say(1500)],
        [
            Hears(1600, QUESTION, probability=0.6),
            Hears(3600, "Okay.", probability=0.1),
            Hears(99_000, "Okay, actually I meant Saturday.", 0.8),
        ],
        lambda out: (
            (out.of(Hold) and not out.of(Resume) and out.of(Clear))
            or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "background voices after a backchannel do not keep the bot held",
        # Babble the speech detector calls speech, but nowhere near a caller's level.
        [Say(1500), Quiet(1500), Say(400), Quiet(200), Say(1500, level_db=FLOOR_DB + 5)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "Mhm.", probability=0.1)],
        lambda out: (out.of(Resume) and not out.of(Clear)) or pytest.fail(str(out.decisions)),
        duplex=False,  # the gateway gates babble out before the duplex backend
    ),
    Case(
        "a backchannel resumes the bot once the caller has been quiet a moment",
        [Say(1500), Quiet(1500), Say(400)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "Mhm.", probability=0.1)],
        resumes_after(3400 + TurnTaking().resume_min_silence_ms),
    ),
    Case(
        "a backchannel over a reply already all sent leaves the bot's turn to it",
        # Resumed in the frame it was held, a reply whose audio was all sent was taken
        # for played out: the next "Right." over it was answered as the caller's turn.
        [Say(1500), Quiet(1500), Say(400), Quiet(1500), Say(300)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "Mhm.", probability=0.1)],
        lambda out: (
            ([a.text for a in out.of(Answer)] == [QUESTION] and len(out.of(Resume)) == 2)
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(reply_ms=8000, made_ms=500),
        duplex=False,
    ),
    Case(
        "short words that are no backchannel keep the bot held a while longer",
        [Say(1500), Quiet(1500), Say(400)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "I'm", probability=0.1)],
        resumes_after(3400 + TurnTaking().resume_after_words_ms),
    ),
    Case(
        "a caller who goes on after a 500 ms comma pause is not talked over",
        # "No wait, | actually I meant Saturday": its first words heard as "I'm".
        [Say(1500), Quiet(1500), Say(400), Quiet(500), Say(1500)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "I'm", probability=0.1)],
        lambda out: (not out.of(Resume) and out.of(Clear)) or pytest.fail(str(out.decisions)),
    ),
    Case(
        "a real interruption stops the bot within a few frames and takes the turn",
        [Say(1500), Quiet(2000), Say(1500)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "No wait, Saturday.", 0.8)],
        interruption_stops_fast(onset_ms=3500),
    ),
    Case(
        "the bot is held as soon as speech over it is noticed, counted from its onset",
        # The detector notices speech 64 ms after its onset (80-100 ms in calls): counted
        # from the notice, the hold came 60 ms later, and a bot sentence starting in its
        # pause played 140 ms into a caller's "Yeah." before the `clear`.
        [Say(1500), Quiet(2000), Say(1500)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "No wait, Saturday.", 0.8)],
        lambda out: (
            (out.at(Hold) and out.at(Hold)[0] - 3500 <= 80) or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "a short 'stop' over the bot is an interruption by its words",
        [Say(1500), Quiet(2000), Say(400)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "Stop.", probability=0.8)],
        lambda out: (
            (
                out.of(Hold)
                and out.of(Clear)
                and [a.text for a in out.of(Answer)] == [QUESTION, "Stop."]
            )
            or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "the bot's own echo over it, quiet next to the bot, never holds it",
        [Say(1500), Quiet(1500), Say(1000, level_db=BOT_DB - 25)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "echo words")],
        lambda out: (
            (
                not out.of(Hold)
                and any(isinstance(e, EchoIgnored) for _, e in out.events)
                and len(out.bot_audible_ms) * 20 >= 3980
            )
            or pytest.fail(str(out.decisions))
        ),
        duplex=False,
    ),
    Case(
        "until the echo canceller has settled, a hold needs twice the speech",
        [Say(1500), Quiet(1500), Say(1500)],
        [Hears(1600, QUESTION, probability=0.6), Hears(99_000, "No wait, Saturday.", 0.8)],
        lambda out: (
            (out.at(Hold)[0] - 3000 >= 2 * 60 and out.of(Clear)) or pytest.fail(str(out.decisions))
        ),
        echo_settled=False,
        duplex=False,
    ),
    Case(
        "speech with an empty transcript gets asked to repeat",
        [Say(900)],
        [Hears(99_000, "", probability=0.2, hearing=Hearing.UNCLEAR)],
        lambda out: (
            ([r.reason for r in out.of(Reprompt)] == ["unclear"] and not out.of(Answer))
            or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "a click the transcript says is nothing is not a turn",
        [Say(100)],
        [Hears(99_000, "", probability=0.0, hearing=Hearing.NOTHING)],
        lambda out: (
            (
                not out.of(Reprompt)
                and not out.of(Answer)
                and any(isinstance(e, NotSpeech) for _, e in out.events)
            )
            or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "a farewell is heard and answered with a goodbye",
        [Say(1200)],
        [Hears(99_000, "Thank you, bye.", probability=0.7)],
        lambda out: (
            (
                answered_once("Thank you, bye.", after_ms=1200, within_ms=400)(out)
                or [a.farewell for a in out.of(Answer)] == [True]
            )
            or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "'thank you' alone is heard, and is not a goodbye",
        [Say(900)],
        [Hears(99_000, "Thank you.", probability=0.7)],
        lambda out: (
            [(a.text, a.farewell) for a in out.of(Answer)] == [("Thank you.", False)]
            or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "the caller going on before the reply is heard withdraws the answer",
        [Say(1500), Quiet(300), Say(1500)],
        [Hears(1600, "Can I book?", probability=0.9), Hears(99_000, BOOKING, 0.9)],
        lambda out: (
            (
                [r.restore for r in out.of(Reopen)] == [True]
                and [a.text for a in out.of(Answer)] == ["Can I book?", BOOKING]
                and out.of(Answer)[-1].start == out.of(Answer)[0].start
            )
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(latency_ms=600),
        duplex=False,
    ),
    Case(
        "a caller who went on after the bot answered into their pause is waited for after",
        # Bench turns, babble: "a table for | six people" came back "a table 4." and was
        # answered 700 ms into a 1.2 s pause; the caller went on over the reply's first
        # half second. A caller pausing that long once does it again.
        [Say(1500), Quiet(1100), Say(1500), Quiet(1200), Say(1000)],
        [
            Hears(1600, TABLE_FOR_YOU, 0.9),
            Hears(4200, "Six people next Tuesday.", 0.3),
            Hears(99_000, SIX_AT_NOON, 0.3),
        ],
        answered_in_the_pause_then_waited_for(pause_ms=1100),
    ),
    Case(
        "a caller who went on most of a second into the reply is waited for after",
        # Echo line: "a table for | six people" came back "...a table for it." and was
        # answered 0.74 s into the 1.5 s pause; the caller went on 0.76 s into the reply.
        [Say(1500), Quiet(1650), Say(1500), Quiet(1300), Say(1000)],
        [
            Hears(1600, TABLE_FOR_YOU, 0.3),
            Hears(4750, "Six people next Tuesday.", 0.3),
            Hears(99_000, SIX_AT_NOON, 0.3),
        ],
        answered_in_the_pause_then_waited_for(pause_ms=1650),
    ),
    Case(
        "a caller cutting in early with 'No wait,' interrupts: they showed no pause",
        # Bench turns' early interruption, 0.4 s into the reply: once taken for a caller
        # going on, it made their later statements wait 1.2 s.
        [Say(1500), Quiet(1400), Say(1500), Quiet(1500)],
        [
            Hears(1600, "I'd like to book a table for you.", 0.9),
            Hears(99_000, "No wait, actually I meant Saturday.", 0.9),
        ],
        lambda out: (
            (
                [a.text for a in out.of(Answer)]
                == ["I'd like to book a table for you.", "No wait, actually I meant Saturday."]
                and not [e for _, e in out.events if isinstance(e, PatienceRaised)]
                # a statement's 700 ms: not carried on as a long turn (1.0 s) either
                and out.at(Answer)[1] <= 1500 + 1400 + 1500 + 700 + 200
            )
            or pytest.fail(str(out.decisions))
        ),
    ),
    Case(
        "a short 'No wait.' early in the reply interrupts: they showed no pause",
        # Held, judged by its words (not its length), then taken as a turn of its own.
        [Say(1500), Quiet(1400), Say(500), Quiet(1500)],
        [Hears(1600, TABLE_FOR_YOU, 0.9), Hears(99_000, "No wait.", 0.98)],
        lambda out: (
            (
                [a.text for a in out.of(Answer)] == [TABLE_FOR_YOU, "No wait."]
                and out.of(Hold)
                and out.of(Clear)
                and not [e for _, e in out.events if isinstance(e, PatienceRaised)]
            )
            or pytest.fail(str(out.decisions))
        ),
        duplex=False,
    ),
    Case(
        "a caller answering a short reply as it ends is not taken for one who paused",
        # "For how many?" (1 s) - "Six people, at noon." from its last words: 1.9 s after
        # their turn, no pause of theirs.
        [Say(1500), Quiet(1900), Say(1200), Quiet(1500)],
        [Hears(1600, TABLE_FOR_YOU, 0.9), Hears(99_000, "Six people, at noon.", 0.98)],
        lambda out: (
            (
                [a.text for a in out.of(Answer)] == [TABLE_FOR_YOU, "Six people, at noon."]
                and not [e for _, e in out.events if isinstance(e, PatienceRaised)]
            )
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(reply_ms=1000),
    ),
    *[
        Case(
            f"a short answer over a reply's last words is answered once it ends: {said} "
            f"({reply_ms} ms reply)",
            # "For how many?" - "Six." 100 ms before its end, or a quick "Yes." into
            # Piper's trailing silence: the bot was held, judged it a backchannel (short,
            # no interruption's words), resumed, ended, and the answer was lost.
            [Say(1500), Quiet(2200), Say(600), Quiet(2500)],
            [Hears(1600, TABLE_FOR_YOU, 0.3), Hears(99_000, said, probability)],
            lambda out, said=said: (
                (
                    [a.text for a in out.of(Answer)] == [TABLE_FOR_YOU, said]
                    and out.of(Hold)
                    and out.of(Resume)
                    and not out.of(Clear)
                    and answered_as_the_reply_ends(out)
                )
                or pytest.fail(str(out.decisions))
            ),
            bot=Bot(reply_ms=reply_ms),
            duplex=False,  # (its reply plays in 200 ms units: over before "Six.")
        )
        for said, probability in (("Six.", 0.98), ("Yes.", 0.2))
        # (held with 100 ms of the reply to come, or with all of it played)
        for reply_ms in (1100, 1000)
    ],
    *[
        Case(
            f"{what} over a reply's end is not answered",
            [Say(1500), Quiet(2200), Say(speech_ms), Quiet(3500)],
            [Hears(1600, TABLE_FOR_YOU, 0.3), Hears(99_000, said, probability)],
            lambda out: (
                ([a.text for a in out.of(Answer)] == [TABLE_FOR_YOU] and out.of(Resume))
                or pytest.fail(str(out.decisions))
            ),
            bot=Bot(reply_ms=reply_ms),
            duplex=False,
        )
        for what, speech_ms, said, probability, reply_ms in (
            # 1.4 s of the reply still to come: the reply went on, and it was a backchannel
            ("a backchannel with more than a second to come", 400, "Mhm.", 0.98, 2300),
            ("a hum Whisper made words of", 500, "And make him.", 0.1, 1000),
        )
    ],
    *[
        Case(
            f"a short answer over a reply's end is not answered {when}",
            [Say(1500), Quiet(2200), Say(600), Quiet(4000)],
            [Hears(1600, TABLE_FOR_YOU, 0.3), Hears(99_000, "Bye.", 0.98)],
            lambda out: (
                ([a.text for a in out.of(Answer)] == [TABLE_FOR_YOU] and out.of(Resume))
                or pytest.fail(str(out.decisions))
            ),
            bot=bot,
            duplex=False,
        )
        for when, bot in (
            # "Thanks for calling. Goodbye!" - "Bye.": the call ends; no second goodbye.
            ("when the reply ends the call", Bot(reply_ms=1100, last=True)),
            # The reply's last clause came 2 s late: it was not ending when they spoke.
            ("when the reply stalled after them", Bot(reply_ms=1100, made_ms=4500)),
        )
    ],
    Case(
        "a caller going on before the reply to words over a reply's end is heard starts "
        "a turn of their own",
        # The words' audio, said over the bot, is not kept for long: reopening them
        # would transcribe the new words alone as "Six." plus them.
        [Say(1500), Quiet(2200), Say(600), Quiet(700), Say(1000), Quiet(2500)],
        [
            Hears(1600, TABLE_FOR_YOU, 0.3),
            Hears(4400, "Six.", 0.98),
            Hears(99_000, "At seven.", 0.98),
        ],
        lambda out: (
            (
                [a.text for a in out.of(Answer)] == [TABLE_FOR_YOU, "Six.", "At seven."]
                and [r.restore for r in out.of(Reopen)] == [False]
            )
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(reply_ms=1100),
        duplex=False,
    ),
    Case(
        "a caller who went on before the reply was heard is waited for after",
        [Say(1500), Quiet(1200), Say(1500), Quiet(1000), Say(1000)],
        [
            Hears(1600, "I'd like to book a table for you.", 0.3),
            Hears(4300, "I'd like to book a table for you. Six people.", 0.3),
            Hears(99_000, "I'd like to book a table for you. Six people. At noon.", 0.3),
        ],
        lambda out: (
            (
                [a.text for a in out.of(Answer)]
                == [
                    "I'd like to book a table for you.",
                    "I'd like to book a table for you. Six people. At noon.",
                ]
                and [r.restore for r in out.of(Reopen)] == [True]
                and patience_raised_once(out, pause_ms=1200)
            )
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(latency_ms=600),
        duplex=False,
    ),
    Case(
        "a caller prompting a slow reply is not taken for one who paused",
        # "Hello?" 1.8 s after their turn, the reply not heard yet: the bot was slow.
        [Say(1500), Quiet(1800), Say(500), Quiet(3000)],
        [
            Hears(1600, "I'd like to book a table for you.", 0.9),
            Hears(99_000, "I'd like to book a table for you. Hello?", 0.9),
        ],
        lambda out: (
            (
                [r.restore for r in out.of(Reopen)] == [True]
                and not [e for _, e in out.events if isinstance(e, PatienceRaised)]
            )
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(latency_ms=2500),
        duplex=False,
    ),
    Case(
        "a reader held on a word of theirs and resumed is still going on when they go on",
        # "...ring the bell | twice, | because the first one is broken": "Twice." over
        # the reply's first words is judged a backchannel and the bot resumes; the
        # reply audio heard, not the time since it began, says they were not answering.
        [Say(6000), Quiet(1300), Say(400), Quiet(700), Say(2000), Quiet(900), Say(2000)],
        [
            Hears(6100, "I'm reading my order. Two pizzas. Please ring the bell.", 0.44),
            Hears(7800, "Twice.", 0.9),
            Hears(10_500, "Because the first one is broken.", 0.3),
            Hears(99_000, "Because the first one is broken. That's the order.", 0.3),
        ],
        lambda out: (
            (
                [a.text for a in out.of(Answer)][-1]
                == "Because the first one is broken. That's the order."
                and len(out.of(Answer)) == 2
                and out.of(Resume)
                and patience_raised_once(out, pause_ms=1300)
            )
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(latency_ms=50),
        duplex=False,
    ),
    Case(
        "a caller who answers the reply is not taken for one who paused",
        # Onset 1.1 s into the reply: they heard it. Their next statement is answered
        # after the usual pause.
        [Say(1500), Quiet(1850), Say(1500), Quiet(1500)],
        [
            Hears(1600, "I'd like to book a table for you.", 0.9),
            Hears(99_000, "For Saturday instead, please.", 0.9),
        ],
        lambda out: (
            (
                [a.text for a in out.of(Answer)]
                == ["I'd like to book a table for you.", "For Saturday instead, please."]
                and not [e for _, e in out.events if isinstance(e, PatienceRaised)]
                and out.at(Answer)[1] <= 1500 + 1850 + 1500 + 700 + 200
            )
            or pytest.fail(str(out.decisions))
        ),
        bot=Bot(latency_ms=50),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_engine(case: Case) -> None:
    out = run(
        case.script, case.hears, config=case.config, bot=case.bot, echo_settled=case.echo_settled
    )
    case.check(out)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.duplex], ids=[c.name for c in CASES if c.duplex]
)
async def test_the_duplex_cascade_backend(case: Case) -> None:
    """The same table through CascadeDuplexBackend: the same decisions, unit by unit."""
    case.check(await run_duplex(case.script, case.hears, config=case.config, bot=case.bot))


def test_a_turn_with_no_pause_is_judged_at_its_cap_and_answered_at_the_hard_cap() -> None:
    config = TurnTaking(max_utterance_s=4.0, recheck_s=2.0, hard_max_utterance_s=8.0)
    out = run([Say(10_000)], [Hears(99_000, "and so on and", probability=0.05)], config=config)
    capped = [d for d in out.of(Evaluate) if d.capped]
    assert [round(d.end / 16000) for d in capped][:3] == [4, 6, 8]
    assert any(isinstance(e, TurnCapped) for _, e in out.events)
    assert out.at(Answer) and 8000 <= out.at(Answer)[0] <= 8200


def test_states_only_move_along_their_transitions() -> None:
    engine = TurnEngine(TurnTaking())
    assert engine.state is TurnState.LISTENING
    with pytest.raises(IllegalTransition):
        engine._to(TurnState.HELD)


# --- the fused judge drives the same engine ------------------------------------------------


@pytest.mark.parametrize(
    ("words", "answered_within_ms"),
    [(0.9, (150, 500)), (0.001, (1500, 2200))],
    ids=["finished words: answered at once", "dangling words: the pause is waited out"],
)
def test_the_fused_judges_wait_decides_when_a_pause_is_answered(
    words: float, answered_within_ms: tuple[int, int]
) -> None:
    config = TurnTaking()
    judge = FusedJudge(config, FusedWeights(0.0, 1.0, 0.0, 200, 2000))
    out = run([Say(1500), Quiet(3000)], [Hears(10_000, "some words", 0.5, words=words)],
              config=config, judge=judge)  # fmt: skip
    [answered] = out.at(Answer)
    low, high = answered_within_ms
    assert low <= answered - 1500 <= high


def test_under_the_fused_judge_a_caller_who_goes_on_is_not_answered() -> None:
    config = TurnTaking()
    judge = FusedJudge(config, FusedWeights(0.0, 1.0, 0.0, 200, 2000))
    out = run(
        [Say(1200), Quiet(1200), Say(1000), Quiet(3000)],
        [
            Hears(1300, "I was going to", 0.5, words=0.001),
            Hears(10_000, "I was going to ask", 0.5, words=0.9),
        ],
        config=config,
        judge=judge,
    )
    [answered] = out.at(Answer)
    assert answered > 3400  # after the second part, not in the pause


def test_the_record_says_what_the_words_judge_scored_the_answered_words() -> None:
    config = TurnTaking()
    judge = FusedJudge(config, FusedWeights(0.0, 1.0, 0.0, 200, 2000))
    out = run([Say(1500), Quiet(3000)], [Hears(10_000, "Do you open at nine?", 0.5, words=0.9)],
              config=config, judge=judge)  # fmt: skip
    [ended] = [event for _, event in out.events if isinstance(event, EndOfTurn)]
    assert (ended.text, ended.words) == ("Do you open at nine?", 0.9)
