"""The turn judge: has the caller finished? Asked by the engine at every pause.

The engine knows the turn's shape (where speech stopped, how long the caller has talked,
what they said before); the judge reads its words and its voice (the end-of-turn model's
probability) and says whether the silence so far ends it. `TurnJudge` is the interface.

- `FusedJudge` (TURN_JUDGE=words, the default): the words judge's probability that the
  words so far are a whole turn (a language model's, agents/cascade/words_judge.py) and
  Smart Turn's, fused by a logistic whose few weights are fitted on fresh corpus speech
  (`python -m benchmarks judge`), set the pause. No word lists.
- `TextRulesJudge` (TURN_JUDGE=rules): Whisper's punctuation and the closed word classes
  of agents/turns/text.py set how long a pause ends the turn; Smart Turn can shorten it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from agents.turns.config import FusedWeights, TurnTaking
from agents.turns.protocol import Evaluation, Hearing
from agents.turns.text import (
    addresses_the_listener,
    asks_a_question,
    claims_the_floor,
    is_backchannel,
    is_farewell,
    looks_unfinished,
    makes_a_request,
    only_trails_off,
    sentences,
    sounds_finished,
)

__all__ = ["FusedJudge", "Said", "TextRulesJudge", "TurnJudge", "TurnSoFar", "judge_for"]


@dataclass(frozen=True, slots=True)
class Said:
    """What a caller turn amounted to, for the turn that carries on from it."""

    end: int  # where its speech ended
    sentences: int
    length_s: float
    announced: bool  # the caller said more is coming
    at: int = 0  # where it was answered


@dataclass(frozen=True, slots=True)
class TurnSoFar:
    """What the judge is asked about: the latest evaluation and the turn around it."""

    result: Evaluation
    said: Said  # the turn so far, with the answered turn it carries on from
    run_s: float  # from its first speech to the evaluation's end
    cut_in: bool  # it took the floor from the bot
    patience_ms: int  # the longest pause of this caller's the bot answered into, and more


class TurnJudge(Protocol):
    def ends_turn(self, turn: TurnSoFar, silence_ms: int) -> bool:
        """Whether `silence_ms` of quiet after `turn` ends the caller's turn."""
        ...

    def answerable(self, result: Evaluation) -> bool:
        """Words said over the bot's last words that are a turn to answer."""
        ...


class TextRulesJudge:
    def __init__(self, config: TurnTaking) -> None:
        self.cfg = config

    def ends_turn(self, turn: TurnSoFar, silence_ms: int) -> bool:
        cfg = self.cfg
        result = turn.result
        sure = _voice(result) >= cfg.end_of_turn_threshold
        text = result.text
        unfinished = looks_unfinished(text)
        if result.capped:
            if turn.run_s >= cfg.hard_max_utterance_s:
                return True
            return sure or (sounds_finished(text) and not unfinished)
        length_s, said, announced = turn.said.length_s, turn.said.sentences, turn.said.announced
        reading = announced or (said >= cfg.reading_sentences and length_s >= cfg.long_turn_s)
        if reading:
            # A reader's sentence opening like a question is mostly their text read out
            # or Whisper's fragment across a pause: under babble, a misheard fragment of
            # a list that opened like a question was answered in 240 ms, mid-reading. A
            # reader asking says it with a rise: Whisper's "?", on a question of a few
            # words or one Smart Turn is sure of. Whisper also makes a question of a
            # word said after a reader's pause (tiny.en and base, every line).
            last = sentences(text)[-1] if text.strip() else ""
            asked = last.rsplit(",", 1)[-1]
            # ...and one of several words asks the listener (a second-person question):
            # a reader's garble Whisper made a question of does not (an address read
            # out on espeak under babble, Smart Turn 0.02, answered 250 ms into a pause).
            worded = len(asked.split()) >= 3 and addresses_the_listener(asked)
            question = last.endswith("?") and (worded or sure) and not unfinished
        else:
            question = (asks_a_question(text) or makes_a_request(text)) and not unfinished
        # How long a pause ends the turn, by what the words say. Smart Turn scores flat
        # prosody (synthetic or monotone callers, measured 0.01-0.02 on Piper questions)
        # low even on complete questions, so Whisper's punctuation leads and Smart Turn
        # can only shorten the wait.
        if result.hearing is not Hearing.HEARD:
            # No words to go on, so no hurry: asking again into a comma's pause talks
            # over the caller (a first word Whisper made nothing of, before a comma).
            wait = cfg.statement_min_silence_ms if sure else cfg.max_silence_ms
        elif unfinished and sure and only_trails_off(text):
            # A word and Whisper's ellipsis (Smart Turn 0.96): the ellipsis is the only
            # sign of more to come, and the voice sounded done. Waited 2 s, it was dead air.
            wait = cfg.statement_min_silence_ms
        elif unfinished:
            wait = cfg.unfinished_max_silence_ms
        elif question or is_farewell(text):
            wait = cfg.min_silence_ms
        elif (
            sure
            and len(text.split()) <= cfg.short_answer_words
            and not claims_the_floor(text)
            and not turn.cut_in
        ):
            wait = cfg.min_silence_ms  # a short answer: a word or two, said as final
        elif sure or sounds_finished(text):
            # A statement can be the first of several sentences, and Whisper makes a
            # whole one of half a sentence (a preposition and a pause, closed with an
            # invented word, which Smart Turn scored 0.95-0.98 on espeak).
            wait = cfg.statement_min_silence_ms
        else:
            wait = cfg.max_silence_ms
        if length_s >= cfg.long_turn_s and not question:
            # Smart Turn being sure still counts for one long sentence ending with a
            # falling, final voice. Not after several: a reader's or an explainer's
            # pauses between sentences all sound final (Smart Turn 0.6-0.97 on Piper
            # reading an order aloud).
            if said >= cfg.reading_sentences:
                floor = cfg.reading_min_silence_ms
            elif sure and said <= 1:
                floor = cfg.statement_min_silence_ms
            else:
                floor = cfg.long_turn_min_silence_ms
            wait = max(wait, floor)
        if announced and not question:
            wait = max(wait, cfg.reading_min_silence_ms)  # they said more is coming
        if not question and wait >= cfg.statement_min_silence_ms:
            wait = max(wait, turn.patience_ms)
        return silence_ms >= wait

    def answerable(self, result: Evaluation) -> bool:
        """Words that answer, should the bot have been ending: a backchannel's or ones
        the end-of-turn model is sure of (a number given), not a hum's words Whisper
        made or a sentence's start."""
        text = result.text.strip()
        if result.hearing is not Hearing.HEARD or not text or looks_unfinished(text):
            return False
        return is_backchannel(text) or _voice(result) >= self.cfg.end_of_turn_threshold


class FusedJudge:
    """The words judge and Smart Turn fused: how sure the turn is over sets the pause.

    No word lists: the words' completeness is the language model's, the voice's is Smart
    Turn's, and the wait slides from `sure_wait_ms` (certainly over) to `unsure_wait_ms`
    (certainly not) with the fused probability."""

    def __init__(self, config: TurnTaking, weights: FusedWeights | None = None) -> None:
        self.cfg = config
        self.weights = weights or config.fused
        # Words with no score (the words judge failed, or never ran) are judged as the
        # rules judge would: an unknown score must not read as "surely finished".
        self._without_words = TextRulesJudge(config)

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
    whenever the words judge has no score, so the rules judge always has it.)"""
    return 0.0 if result.probability is None else result.probability


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1.0 - 1e-4)
    return math.log(p / (1.0 - p))


def judge_for(config: TurnTaking, *, words: bool) -> TurnJudge:
    """The judge a call's engine uses: fused when the words judge runs, else the rules."""
    return FusedJudge(config) if words else TextRulesJudge(config)
