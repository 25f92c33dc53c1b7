"""One call of `python -m benchmarks turns` judged against its script, from what the
caller heard (the measures are defined in the package's docstring)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Final

from benchmarks.turns.script import EXPECTS_ANSWER, Kind, TurnFacts
from ops.simulate import CallReport, TurnResult

ANSWER_WINDOW_MS: Final = 5000.0
DEAD_AIR_MS: Final = 2000.0
BACKCHANNEL_WINDOW_MS: Final = 1500.0
# A talk-over onset whose bot audio reaches its full level this soon is a reply (or a
# resumption) starting; one that stays under it is a held bot playing on lowered.
FULL_LEVEL_WITHIN_MS: Final = 200.0

Span = tuple[float, float]


def _overlaps(utterances: Iterable[Span], lo: float, hi: float) -> bool:
    """Some bot audio was heard in (lo, hi)."""
    return any(start < hi and end > lo for start, end in utterances)


def _in_progress(utterances: Iterable[Span], at: float) -> Span | None:
    return next(((s, e) for s, e in utterances if s <= at < e), None)


@dataclass
class TurnScore:
    """One scripted caller turn, judged (None: the measure does not apply)."""

    kind: str
    text: str
    where: str
    said: bool
    start_ms: float | None = None
    end_ms: float | None = None
    bot_queued_ms: float | None = None
    answered: bool | None = None
    latency_ms: float | None = None
    talk_over_onsets: list[float] = field(default_factory=list)
    talk_over_lowered: int = 0  # of them, a held bot playing on lowered (HOLD_DUCK_DB)
    dead_air: bool | None = None
    cut_off: bool | None = None
    cut_off_inside_pause: bool | None = None
    heard_whole: bool | None = None
    judged: bool | None = None  # backchannels, interruptions: spoken over bot audio
    false_stop: bool | None = None
    backchannel_pause_ms: float | None = None
    backchannel_lowered_ms: float | None = None  # not at full level (silent or lowered)
    tail_ms: float | None = None
    tail_full_ms: float | None = None  # of it, at the bot's full level


@dataclass
class Tally:
    """Counts and samples over any number of calls."""

    calls: int = 0
    failed_calls: int = 0
    expect_answer: int = 0
    answered: int = 0
    talk_over: int = 0
    talk_over_lowered: int = 0
    pause_turns: int = 0
    cut_offs: int = 0
    readings: int = 0
    readings_whole: int = 0
    backchannels: int = 0
    backchannels_judged: int = 0
    false_stops: int = 0
    backchannel_pauses_ms: list[float] = field(default_factory=list)
    backchannel_lowered_ms: list[float] = field(default_factory=list)
    interruptions: int = 0
    tails_ms: list[float] = field(default_factory=list)
    tails_full_ms: list[float] = field(default_factory=list)
    dead_air_turns: int = 0
    dead_air_in_replies: int = 0
    underruns: int = 0
    underrun_ms: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    protocol_violations: int = 0

    def add(self, other: Tally) -> None:
        for name, value in vars(other).items():
            mine = getattr(self, name)
            setattr(self, name, [*mine, *value] if isinstance(mine, list) else mine + value)


def score_unplaced(facts: Sequence[TurnFacts]) -> tuple[Tally, list[TurnScore]]:
    """A call that never connected: every turn unsaid, none answered."""
    tally = Tally(calls=1, failed_calls=1)
    scores = []
    for fact in facts:
        scores.append(TurnScore(fact.kind, fact.text, fact.where, said=False))
        _count_unsaid(tally, fact)
    return tally, scores


def _count_unsaid(tally: Tally, fact: TurnFacts, *, owed: bool = True) -> None:
    """Count a turn of the script; `owed`: it was not left unsaid by the caller's choice."""
    if fact.kind in EXPECTS_ANSWER and owed:
        tally.expect_answer += 1
    tally.pause_turns += fact.kind is Kind.PAUSE
    tally.readings += fact.kind is Kind.READING
    tally.backchannels += fact.kind is Kind.BACKCHANNEL
    tally.interruptions += fact.kind is Kind.INTERRUPTION


def score_call(facts: Sequence[TurnFacts], report: CallReport) -> tuple[Tally, list[TurnScore]]:
    """Judge one call against its script, from what the caller heard (see module doc)."""
    utterances = list(report.bot_utterances)
    full = report.bot_full_level_spans()
    onsets = [start for start, _ in utterances]
    said = report.turns
    tally = Tally(
        calls=1,
        underruns=report.underruns,
        underrun_ms=report.underrun_ms,
        protocol_violations=len(report.protocol_violations),
    )
    scores: list[TurnScore] = []
    for i, fact in enumerate(facts):
        left = i < len(said) and not said[i].said  # the caller let it go (see above)
        _count_unsaid(tally, fact, owed=not left)
        if i >= len(said) or left:
            scores.append(TurnScore(fact.kind, fact.text, fact.where, said=False))
            continue
        turn = said[i]
        start, end = turn.speech_start_ms, turn.speech_end_ms
        following = next((t.speech_start_ms for t in said[i + 1 :] if t.said), None)
        score = TurnScore(
            fact.kind,
            fact.text,
            fact.where,
            said=True,
            start_ms=start,
            end_ms=end,
            bot_queued_ms=turn.bot_queued_ms,
        )
        score.talk_over_onsets = [t for t in onsets if start <= t < end]
        tally.talk_over += len(score.talk_over_onsets)
        score.talk_over_lowered = sum(
            not _overlaps(full, t, t + FULL_LEVEL_WITHIN_MS) for t in score.talk_over_onsets
        )
        tally.talk_over_lowered += score.talk_over_lowered
        if fact.kind in EXPECTS_ANSWER:
            _judge_answer(score, tally, onsets, utterances, following)
        if fact.kind is Kind.PAUSE and fact.pauses_ms:
            pause_start = start + fact.pauses_ms[0][0]
            score.cut_off = any(pause_start <= t < end for t in onsets)
            score.cut_off_inside_pause = any(
                start + lo <= t < start + hi for lo, hi in fact.pauses_ms for t in onsets
            )
            tally.cut_offs += score.cut_off
        if fact.kind is Kind.READING:
            score.heard_whole = not _overlaps(utterances, start, end)
            tally.readings_whole += score.heard_whole
        if fact.kind is Kind.BACKCHANNEL:
            _judge_backchannel(score, tally, utterances, report.clears)
            if score.false_stop is False:
                _judge_lowered(score, tally, utterances, full)
        if fact.kind is Kind.INTERRUPTION:
            reply = _in_progress(utterances, start)
            score.judged = reply is not None
            if reply is not None:
                score.tail_ms = reply[1] - start
                tally.tails_ms.append(score.tail_ms)
                loud = _in_progress(full, start)
                score.tail_full_ms = 0.0 if loud is None else min(loud[1], reply[1]) - start
                tally.tails_full_ms.append(score.tail_full_ms)
        scores.append(score)
    tally.dead_air_in_replies = len(_silences_in_replies(utterances, facts, said))
    return tally, scores


def _judge_answer(
    score: TurnScore,
    tally: Tally,
    onsets: Sequence[float],
    utterances: Sequence[Span],
    following: float | None,
) -> None:
    assert score.start_ms is not None and score.end_ms is not None
    end = score.end_ms
    limit = following if following is not None else end + ANSWER_WINDOW_MS
    reply = next((t for t in onsets if end <= t < limit), None)
    score.answered = reply is not None
    if reply is not None:
        score.latency_ms = reply - end
        tally.answered += 1
        tally.latencies_ms.append(score.latency_ms)
    caller_silent = following is None or following - end > DEAD_AIR_MS
    score.dead_air = caller_silent and not _overlaps(utterances, end, end + DEAD_AIR_MS)
    tally.dead_air_turns += score.dead_air


def _judge_backchannel(
    score: TurnScore, tally: Tally, utterances: Sequence[Span], clears: Sequence[float]
) -> None:
    assert score.start_ms is not None and score.end_ms is not None
    start, end = score.start_ms, score.end_ms
    reply = _in_progress(utterances, start)
    score.judged = reply is not None
    if reply is None:
        return
    tally.backchannels_judged += 1
    window = BACKCHANNEL_WINDOW_MS
    went_on = _overlaps(utterances, end, end + window)
    late_clears = [c for c in clears if start <= c <= end + window]
    if late_clears:
        clear = late_clears[-1]
        went_on = went_on and _overlaps(utterances, clear, max(clear, end) + window)
    score.false_stop = not went_on
    tally.false_stops += score.false_stop
    if went_on:
        after = next((s for s, _ in utterances if s >= reply[1]), None)
        if reply[1] >= end + window:
            score.backchannel_pause_ms = 0.0
        elif after is not None:
            score.backchannel_pause_ms = after - reply[1]
        if score.backchannel_pause_ms is not None:
            tally.backchannel_pauses_ms.append(score.backchannel_pause_ms)


def _judge_lowered(
    score: TurnScore, tally: Tally, utterances: Sequence[Span], full: Sequence[Span]
) -> None:
    """The longest stretch of the reply under full level around a backchannel it went
    on after: the bot silent, or lowered (a caller hears a lowered bot's words, and
    loses none of them). Only while the reply is heard at some level, or paused for the
    backchannel: not in the silence after it ends."""
    assert score.start_ms is not None and score.end_ms is not None
    lo, hi = score.start_ms, score.end_ms + BACKCHANNEL_WINDOW_MS
    heard = [e for s, e in utterances if s < hi and e > lo]
    if not heard:
        return
    hi = min(hi, max(heard))
    covered = sorted((max(s, lo), min(e, hi)) for s, e in full if s < hi and e > lo)
    longest, at = 0.0, lo
    for start, end in covered:
        longest = max(longest, start - at)
        at = max(at, end)
    score.backchannel_lowered_ms = max(longest, hi - at)
    tally.backchannel_lowered_ms.append(score.backchannel_lowered_ms)


def _silences_in_replies(
    utterances: Sequence[Span], facts: Sequence[TurnFacts], said: Sequence[TurnResult]
) -> list[Span]:
    """Silences over DEAD_AIR_MS between bot utterances with the floor still the bot's."""
    floor_taken = [
        (t.speech_start_ms, t.speech_end_ms)
        for t, fact in zip(said, facts, strict=False)
        if fact.kind in EXPECTS_ANSWER and t.said
    ]
    found = []
    for (_, gap_start), (gap_end, _) in pairwise(utterances):
        if gap_end - gap_start <= DEAD_AIR_MS:
            continue
        if not any(s < gap_end and e > gap_start for s, e in floor_taken):
            found.append((gap_start, gap_end))
    return found
