"""The turn judge: has the caller finished? Asked by the engine at every pause.

The engine knows the turn's shape (where speech stopped, how long the caller has talked,
what they said before); the judge reads its words and its voice (the end-of-turn model's
probability) and says whether the silence so far ends it. `TurnJudge` is the interface.

- `FusedJudge` (TURN_JUDGE=words, the default): the words judge's probability that the
  words so far are a whole turn (a language model's, agents/cascade/words_judge.py) and
  Smart Turn's, fused by a logistic whose few weights are fitted on fresh corpus speech
  (`python -m benchmarks judge`), set the pause. No word lists.
- `VoiceJudge` (TURN_JUDGE=voice, and the fused judge's turns it could not score):
  Smart Turn and the silence. No word lists either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from agents.turns.config import FusedWeights, TurnTaking
from agents.turns.protocol import Evaluation, Hearing
from agents.turns.text import is_backchannel

__all__ = ["FusedJudge", "Said", "TurnJudge", "TurnSoFar", "VoiceJudge", "judge_for"]


@dataclass(frozen=True, slots=True)
class Said:
    """A caller turn the bot answered, for the turn that may carry on from it."""

    end: int  # where its speech ended
    at: int = 0  # where it was answered


@dataclass(frozen=True, slots=True)
class TurnSoFar:
    """What the judge is asked about: the latest evaluation and the turn around it."""

    result: Evaluation
    run_s: float  # from its first speech to the evaluation's end
    patience_ms: int  # the longest pause of this caller's the bot answered into, and more


class TurnJudge(Protocol):
    def ends_turn(self, turn: TurnSoFar, silence_ms: int) -> bool:
        """Whether `silence_ms` of quiet after `turn` ends the caller's turn."""
        ...

    def answerable(self, result: Evaluation) -> bool:
        """Words said over the bot's last words that are a turn to answer."""
        ...


class VoiceJudge:
    """Smart Turn and the silence, without a words score: TURN_JUDGE=voice, and the
    fused judge's turns the words judge could not score.

    No word lists. Heard words are answered after END_OF_TURN_MIN_SILENCE_MS when Smart
    Turn is sure (END_OF_TURN_THRESHOLD) and after END_OF_TURN_MAX_SILENCE_MS when not.
    `smart_turn=False`: Smart Turn is not asked either, and every turn waits the longer
    pause (the fused judge's fallback while its fitted weights give Smart Turn none)."""

    def __init__(self, config: TurnTaking, *, smart_turn: bool = True) -> None:
        self.cfg = config
        self.smart_turn = smart_turn

    def _sure(self, result: Evaluation) -> bool:
        return self.smart_turn and _voice(result) >= self.cfg.end_of_turn_threshold

    def ends_turn(self, turn: TurnSoFar, silence_ms: int) -> bool:
        cfg, result = self.cfg, turn.result
        heard = result.hearing is Hearing.HEARD and bool(result.text.strip())
        if result.capped:
            return turn.run_s >= cfg.hard_max_utterance_s or (heard and self._sure(result))
        if heard and self._sure(result):
            return silence_ms >= cfg.min_silence_ms
        # Not sure: the longer pause, and at least this caller's own mid-sentence pause.
        return silence_ms >= max(cfg.max_silence_ms, turn.patience_ms)

    def answerable(self, result: Evaluation) -> bool:
        """Words that answer, should the bot have been ending: a backchannel's (the
        closed class: "yes", "okay" answer a question the bot closed on) or words Smart
        Turn is sure of."""
        text = result.text.strip()
        if result.hearing is not Hearing.HEARD or not text:
            return False
        return is_backchannel(text) or self._sure(result)


class FusedJudge:
    """The words judge and Smart Turn fused: how sure the turn is over sets the pause.

    No word lists: the words' completeness is the language model's, the voice's is Smart
    Turn's, and the wait slides from `sure_wait_ms` (certainly over) to `unsure_wait_ms`
    (certainly not) with the fused probability."""

    def __init__(self, config: TurnTaking, weights: FusedWeights | None = None) -> None:
        self.cfg = config
        self.weights = weights or config.fused
        # Words with no score (the words judge failed, or never ran) wait on the silence:
        # an unknown score must not read as "surely finished", and Smart Turn counts
        # there only where the fitted weights let it count here.
        self._without_words = VoiceJudge(config, smart_turn=self.weights.hears_the_voice)

    @staticmethod
    def features(words: float | None, smart_turn: float | None) -> list[float]:
        unknown = 0.5  # a score not taken says nothing either way
        return [
            1.0,
            _logit(unknown if words is None else words),
            _logit(unknown if smart_turn is None else smart_turn),
        ]

    def probability(self, result: Evaluation) -> float:
        w = self.weights
        bias, words, voice = self.features(result.words, result.probability)
        z = w.bias * bias + w.words * words + w.smart_turn * voice
        z += w.hearing * result.avg_logprob
        return 1.0 / (1.0 + math.exp(-max(min(z, 40.0), -40.0)))

    def ends_turn(self, turn: TurnSoFar, silence_ms: int) -> bool:
        result = turn.result
        heard = result.hearing is Hearing.HEARD and bool(result.text.strip())
        if heard and result.words is None:
            return self._without_words.ends_turn(turn, silence_ms)
        if result.capped:
            if turn.run_s >= self.cfg.hard_max_utterance_s:
                return True
            return heard and self.probability(result) >= 0.5
        return silence_ms >= self.wait_ms(turn)

    def wait_ms(self, turn: TurnSoFar) -> float:
        """The silence after the turn so far that ends it (not capped)."""
        result, w = turn.result, self.weights
        if result.hearing is not Hearing.HEARD or not result.text.strip():
            return w.unsure_wait_ms  # nothing to judge: no hurry
        p = self.probability(result)
        wait = w.sure_wait_ms + (w.unsure_wait_ms - w.sure_wait_ms) * (1.0 - p)
        if p < 0.5:
            # Words that may go on wait at least as long as this caller has been seen to
            # pause mid-sentence; finished-sounding words are not slowed by it.
            wait = max(wait, float(turn.patience_ms))
        return wait

    def answerable(self, result: Evaluation) -> bool:
        heard = result.hearing is Hearing.HEARD and bool(result.text.strip())
        if heard and result.words is None:
            return self._without_words.answerable(result)
        return heard and self.probability(result) >= 0.5


def _voice(result: Evaluation) -> float:
    """Smart Turn's score; one not taken is no sign of an end. (The evaluator takes it
    whenever the judge weighs it: with no words judge, always.)"""
    return 0.0 if result.probability is None else result.probability


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1.0 - 1e-4)
    return math.log(p / (1.0 - p))


def judge_for(config: TurnTaking, *, words: bool) -> TurnJudge:
    """The judge a call's engine uses: fused when the words judge runs, else the voice's."""
    return FusedJudge(config) if words else VoiceJudge(config)
