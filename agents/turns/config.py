"""Every turn-taking setting, as one frozen value: what the engine and both agents read.

Built from the operator's settings by agents/turns/settings.py (`turn_taking`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["FusedWeights", "TurnTaking", "fused_weights"]


@dataclass(frozen=True, slots=True)
class FusedWeights:
    """The fused judge's handful of parameters, fitted on a tuning set
    (`python -m benchmarks judge`): a logistic model of P(the turn is over) on the words
    judge's and Smart Turn's scores and Whisper's confidence in the words, and the waits
    it sets at P = 1 and P = 0."""

    bias: float
    words: float
    smart_turn: float
    sure_wait_ms: int
    unsure_wait_ms: int
    # On Whisper's mean token log-probability (0 for words it is sure of, about -1 for
    # a garble): words it may have misheard are less sure to end the turn.
    hearing: float = 0.0

    @property
    def spec(self) -> str:
        """The weights as TURN_JUDGE_WEIGHTS takes them."""
        return ",".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))

    @property
    def hears_the_voice(self) -> bool:
        """Whether Smart Turn's score counts: when it does not, it need not be computed
        on turns the words judge scores."""
        return self.smart_turn != 0.0


@dataclass(frozen=True, slots=True)
class TurnTaking:
    """Every turn-taking setting; both agents read all of them."""

    end_of_turn_threshold: float = 0.5
    # Without a words score (agents/turns/judge.py VoiceJudge): a turn Smart Turn is sure
    # of is answered after this pause, and any other after the longer one.
    min_silence_ms: int = 200
    max_silence_ms: int = 1000
    # A reply is drafted from words that stop where a sentence cannot (on a preposition,
    # an "and...") only this far into the pause: mostly the caller goes on, but should
    # the judge's wait run out, the first clause is written and spoken by then (first
    # token ~0.3 s, Piper's first clause ~0.35 s).
    unfinished_draft_after_ms: int = 900
    # No caller's mid-sentence pause shorter than this raises the patience: a judge
    # unsure of a turn waits at least this long anyway. (The duplex gateway also gives
    # a worker this long, after a held overlap's speech ends, to say whose turn it is.)
    statement_min_silence_ms: int = 700
    # Speech over the bot this long is an interruption whatever its words (backchannels
    # like "uh-huh, yeah" run to ~900 ms; the bot is held from the first words anyway).
    barge_in_min_speech_ms: int = 1000
    # Loud speech over the bot this long holds the bot's audio (within ~0.15 s of onset).
    hold_min_speech_ms: int = 60
    # ...and this long while the echo canceller is still learning the echo path (the
    # bot's first ~2 s on a line with echo): its echo comes back in runs of up to ~550 ms.
    hold_unsettled_ms: int = 600
    # A hold lowers the bot this many dB instead of stopping it (0: it stops)... The
    # engine's own defaults stop, as its unit tests specify; the app's settings lower
    # (HOLD_DUCK_DB 12 dB, HOLD_LOWERED_MS 120 ms: docs/benchmarks.md, `turns`).
    hold_duck_db: float = 0.0
    # ...until the caller has talked over it this long from their onset: then it is
    # silenced while they go on, and lowered again when they stop, until their words are
    # judged. A real interruption is to be silent at the caller's ear within 250 ms of its
    # onset; this leaves a network hop and a frame for the `clear` (0: lowered throughout).
    lowered_hold_ms: int = 200
    # ...and lowered again once the caller has been quiet this long (under a caller's
    # level), not when speech detection calls their speech over, ~110 ms after its last
    # sound (p50; 170 ms p90), which a backchannel pays as silence. Once per overlap, as
    # at a stop: a caller loud again silences it for good. The level cannot tell a pause
    # between words from the end, so an interruption's first pause gets the lowered bot
    # sooner (docs/benchmarks.md, `turns`: "A hum's end heard sooner", "A silenced bot
    # lowered again once the caller falls quiet"). 0: wait for speech detection, as the
    # engine's own defaults do; the app's HOLD_QUIET_LOWERS_MS is 60 ms.
    lowered_again_quiet_ms: int = 0
    # Short speech over the bot (a held bot) that is shorter than this and whose words
    # are a backchannel lets the bot go on.
    backchannel_max_ms: int = 1200
    # ...but not into a pause this short: a caller opening an interruption with a word
    # or two pauses at the comma for 200-400 ms (heard again ~100 ms after it resumes),
    # and Whisper can make a hum's words of such an opening.
    resume_min_silence_ms: int = 450
    # ...and this long after words that are no backchannel (an opening misheard, whose
    # comma pause can run 500 ms): they may open a sentence. No longer: a hold on the
    # bot's own leaked word then kept it quiet ~1 s, and a caller takes a bot that quiet
    # for done (callers speak up 0.7-0.9 s into a silence).
    resume_after_words_ms: int = 600
    # Words judged a backchannel, or too short to take the turn (a number, a yes), whose
    # resumed reply then plays out within this much audio were said over its last
    # words: a short question answered as it ends, or a quick yes into Piper's 110-240
    # ms of trailing silence, which the bot is held on. They are the caller's turn, and
    # answered once the reply has played out; resumed and played out, they were lost.
    # A word or two, no more: an acknowledgement of one sentence is no answer to the
    # question that follows it.
    reply_end_words_ms: int = 600
    # ...and only within this long of the words' end: a reply that stalls between two
    # clauses (a slow LLM, a busy box) was not ending when they were said.
    reply_end_words_within_ms: int = 2000
    # A caller who goes on after a pause the bot took for their turn's end (before its
    # reply was heard, or cutting into the reply's first `continuation_heard_ms`: too
    # soon to be answering its words, and not opening an interruption) has shown
    # how long they pause. Their next turn carries on from the answered one (a reader's
    # pauses stay a reader's), and from then on no statement is answered before that
    # pause and `patience_margin_ms` more, up to `patience_max_ms`. Questions stay
    # quick. A reader cut into kept being talked over: answered in one pause, they were
    # answered in the next. Not 600 ms: on an echo line a caller pausing 1.5 s after a
    # preposition was answered 0.74 s in, and went on 0.76 s into the reply; under
    # babble, 0.7-0.9 s in.
    continuation_heard_ms: int = 1000
    # ...and resumed within this much of the turn's end: a mid-sentence pause runs to
    # ~1.5 s (the hanging words' wait). A caller answering a short question with a word
    # as it ends comes ~1.9 s after their turn (700 ms wait, first audio, a second of
    # reply) and must not be taken for one who paused that long.
    continuation_max_pause_ms: int = 1700
    # A caller who resumes this soon after the Answer, before any reply is heard, went
    # on (later, a caller prompting a slow reply is no pause of theirs).
    reopen_continuation_ms: int = 600
    patience_margin_ms: int = 250
    patience_max_ms: int = 1500
    echo_margin_db: float = 12.0
    # An interruption stands this far above the call's background (babble, a TV): the
    # background's own bursts, which speech detection may also call speech, never stop
    # the bot.
    barge_in_over_floor_db: float = 10.0
    preroll_ms: int = 300
    # A turn this long with no pause at all is judged without one at this length, and
    # again every `recheck_s`; past the hard cap it is answered whatever they say.
    max_utterance_s: float = 20.0
    recheck_s: float = 5.0
    hard_max_utterance_s: float = 60.0
    # Speech shorter than this is not a turn when its transcript is empty (a cough).
    min_reprompt_speech_ms: int = 250
    digit_timeout_ms: int = 800
    # The fused judge's parameters (agents/turns/judge.py): fitted by `python -m
    # benchmarks judge` (seed 714500, Whisper tiny.en) on the tuning pool of 240 fresh
    # corpus lines, for the fewest cut-offs at the word-list judge's mean wait there
    # (772 ms; that judge is retired). The words tip from "goes on" to "finished" at a
    # score of ~0.03; Smart Turn got no weight (on synthetic voices it scores
    # mid-sentence pauses above ends).
    fused: FusedWeights = FusedWeights(
        bias=6.84, words=2.0, smart_turn=0.0, sure_wait_ms=200, unsure_wait_ms=1800
    )


# The most a fitted wait may be: a caller is not left in silence longer than this.
MAX_FITTED_WAIT_MS = 10_000


def fused_weights(spec: str, shipped: FusedWeights | None = None) -> FusedWeights:
    """TURN_JUDGE_WEIGHTS: the shipped weights with the fields `spec` sets, written as
    `FusedWeights.spec` writes them (and `python -m benchmarks judge` prints them
    fitted); "" keeps them all. ValueError, naming the field, on anything else."""
    weights = shipped or TurnTaking().fused
    names = [f.name for f in fields(FusedWeights)]
    given: dict[str, Any] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        name, equals, value = (piece.strip() for piece in item.partition("="))
        if name not in names:
            raise ValueError(f"{name!r} is none of the weights ({', '.join(names)})")
        if not equals:
            raise ValueError(f"{name} needs a value: {name}=N")
        if name in given:
            raise ValueError(f"{name} is given twice")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        if isinstance(getattr(weights, name), int):  # the waits: whole milliseconds
            if not number.is_integer():
                raise ValueError(f"{name} is whole milliseconds, got {value!r}")
            given[name] = int(number)
        else:
            given[name] = number
    weights = replace(weights, **given)
    # A negative weight would read a finished-sounding turn (or a surer Whisper) as one
    # that goes on: not a judge, and never what a fit gives.
    for name in ("words", "smart_turn", "hearing"):
        if getattr(weights, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(weights, name):g}")
    if not 0 <= weights.sure_wait_ms <= weights.unsure_wait_ms <= MAX_FITTED_WAIT_MS:
        raise ValueError(
            f"the waits must be 0 <= sure_wait_ms <= unsure_wait_ms <= {MAX_FITTED_WAIT_MS}, "
            f"got {weights.sure_wait_ms} and {weights.unsure_wait_ms}"
        )
    return weights
