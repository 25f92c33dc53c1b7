"""The turn judges: how long a silence ends the caller's turn, from words, voice and context.

The fused judge's wait slides from `sure_wait_ms` to `unsure_wait_ms` with the fused
probability; these tests pin that shape on chosen weights, not on any sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
import pytest

from agents.cascade.stt import Transcript
from agents.cascade.turn_evaluator import TurnEvaluator
from agents.cascade.words_judge import judged_words, turn_prompt
from agents.errors import BackendError
from agents.loading import smart_turn_needed
from agents.turns.config import FusedWeights, TurnTaking, fused_weights
from agents.turns.judge import FusedJudge, TurnJudge, TurnSoFar, VoiceJudge, judge_for
from agents.turns.protocol import Evaluate, Evaluation, Hearing

T = TypeVar("T")
WEIGHTS = FusedWeights(bias=0.0, words=1.0, smart_turn=1.0, sure_wait_ms=200, unsure_wait_ms=1800)


def turn(words: float | None, smart_turn: float, *, text: str = "some words", capped: bool = False,
         hearing: Hearing = Hearing.HEARD, run_s: float = 2.0,
         patience_ms: int = 0) -> TurnSoFar:  # fmt: skip
    result = Evaluation(
        end=32000, probability=smart_turn, text=text, hearing=hearing, capped=capped, words=words
    )
    return TurnSoFar(result=result, run_s=run_s, patience_ms=patience_ms)


def wait_ms(judge: TurnJudge, so_far: TurnSoFar) -> int:
    return next(ms for ms in range(0, 5000, 10) if judge.ends_turn(so_far, ms))


@pytest.mark.parametrize(
    ("words", "smart_turn", "low", "high"),
    [
        (0.99, 0.99, 200, 220),  # sure on both counts: the shortest wait
        (0.01, 0.01, 1780, 1800),  # sure it goes on: the longest
        (0.5, 0.5, 990, 1010),  # no idea: half way
    ],
)
def test_the_wait_slides_with_the_fused_probability(
    words: float | None, smart_turn: float, low: int, high: int
) -> None:
    assert low <= wait_ms(FusedJudge(TurnTaking(), WEIGHTS), turn(words, smart_turn)) <= high


def test_more_complete_words_never_wait_longer() -> None:
    judge = FusedJudge(TurnTaking(), WEIGHTS)
    waits = [wait_ms(judge, turn(p, 0.3)) for p in np.linspace(0.01, 0.99, 15)]
    assert waits == sorted(waits, reverse=True)
    assert waits[0] > waits[-1]


def test_without_heard_words_there_is_no_hurry() -> None:
    judge = FusedJudge(TurnTaking(), WEIGHTS)
    for hearing in (Hearing.UNCLEAR, Hearing.NOTHING):
        assert wait_ms(judge, turn(0.99, 0.99, hearing=hearing)) == WEIGHTS.unsure_wait_ms
    assert wait_ms(judge, turn(0.99, 0.99, text="  ")) == WEIGHTS.unsure_wait_ms


def test_a_capped_turn_ends_when_judged_complete_or_at_the_hard_limit() -> None:
    judge = FusedJudge(TurnTaking(hard_max_utterance_s=60.0), WEIGHTS)
    assert judge.ends_turn(turn(0.9, 0.9, capped=True), 0)
    assert not judge.ends_turn(turn(0.05, 0.05, capped=True), 0)
    assert not judge.ends_turn(turn(0.9, 0.9, capped=True, hearing=Hearing.UNCLEAR), 0)
    assert judge.ends_turn(turn(0.05, 0.05, capped=True, run_s=61.0), 0)


@pytest.mark.parametrize("smart_turn", [0.05, 0.5, 0.95])
def test_heard_words_without_a_score_wait_the_longer_pause(smart_turn: float) -> None:
    """A failed words judge must not read as "surely finished" (the shipped bias is high),
    and the shipped weights give Smart Turn no say, so its score changes nothing."""
    config = TurnTaking(max_silence_ms=1100)
    judge = FusedJudge(config)
    assert not judge.weights.hears_the_voice
    assert wait_ms(judge, turn(None, smart_turn)) == 1100
    assert wait_ms(judge, turn(None, smart_turn, patience_ms=1400)) == 1400
    assert not judge.answerable(turn(None, smart_turn).result)


def test_heard_words_without_a_score_are_judged_by_smart_turn_where_the_weights_count_it() -> None:
    judge = FusedJudge(TurnTaking(), WEIGHTS)
    assert wait_ms(judge, turn(None, 0.9)) == TurnTaking().min_silence_ms
    assert wait_ms(judge, turn(None, 0.1)) == TurnTaking().max_silence_ms
    assert judge.answerable(turn(None, 0.9).result)


def test_the_voice_judge_answers_what_smart_turn_is_sure_of_after_the_short_pause() -> None:
    config = TurnTaking(min_silence_ms=250, max_silence_ms=1200, end_of_turn_threshold=0.6)
    judge = VoiceJudge(config)
    assert wait_ms(judge, turn(None, 0.61)) == 250
    assert wait_ms(judge, turn(None, 0.59)) == 1200
    # Patience holds back only the turns it is unsure of.
    assert wait_ms(judge, turn(None, 0.59, patience_ms=1500)) == 1500
    assert wait_ms(judge, turn(None, 0.61, patience_ms=1500)) == 250
    # No words heard: no hurry, however it sounded.
    assert wait_ms(judge, turn(None, 0.99, hearing=Hearing.UNCLEAR)) == 1200
    # The words judge's score is not its to read.
    assert wait_ms(judge, turn(0.99, 0.1)) == 1200
    # Without Smart Turn, every turn waits the longer pause.
    assert wait_ms(VoiceJudge(config, smart_turn=False), turn(None, 0.99)) == 1200


def test_the_voice_judge_ends_a_capped_turn_it_is_sure_of_or_at_the_hard_limit() -> None:
    judge = VoiceJudge(TurnTaking(hard_max_utterance_s=60.0))
    assert judge.ends_turn(turn(None, 0.9, capped=True), 0)
    assert not judge.ends_turn(turn(None, 0.1, capped=True), 0)
    assert judge.ends_turn(turn(None, 0.1, capped=True, run_s=61.0), 0)


@pytest.mark.parametrize(
    ("text", "smart_turn", "answerable"),
    [("Yes.", 0.1, True), ("Mm-hmm", 0.1, True), ("Six.", 0.9, True), ("Six.", 0.1, False)],
)
def test_the_voice_judge_answers_words_over_the_bots_end_that_are_a_backchannel_or_sure(
    text: str, smart_turn: float, answerable: bool
) -> None:
    assert VoiceJudge(TurnTaking()).answerable(turn(None, smart_turn, text=text).result) is (
        answerable
    )


def test_a_callers_learnt_patience_holds_back_only_words_that_may_go_on() -> None:
    judge = FusedJudge(TurnTaking(), WEIGHTS)
    assert wait_ms(judge, turn(0.2, 0.2, patience_ms=1790)) == 1790
    assert wait_ms(judge, turn(0.99, 0.99, patience_ms=1700)) < 300


def test_words_over_the_bots_end_are_answerable_when_judged_complete() -> None:
    judge = FusedJudge(TurnTaking(), WEIGHTS)
    assert judge.answerable(turn(0.9, 0.9).result)
    assert not judge.answerable(turn(0.05, 0.05).result)
    assert not judge.answerable(turn(0.9, 0.9, hearing=Hearing.UNCLEAR).result)


def test_the_shipped_weights_answer_finished_words_fast_and_wait_on_dangling_ones() -> None:
    judge = FusedJudge(TurnTaking())
    assert wait_ms(judge, turn(0.6, 0.5)) <= 400
    assert wait_ms(judge, turn(0.0005, 0.5)) >= 1500
    assert wait_ms(judge, turn(0.6, 0.5, hearing=Hearing.UNCLEAR)) >= 1500


def test_weights_fitted_for_better_hearing_wait_on_words_the_shipped_ones_answer() -> None:
    # Fitted on the words said (docs/benchmarks.md, `turns`, --hear-said): a score that
    # tiny.en's garbled words rarely reach is no sign of an end on words heard right.
    fitted = fused_weights("bias=8.84,words=8")
    unfinished = turn(0.05, 0.5)
    assert wait_ms(FusedJudge(TurnTaking()), unfinished) <= 700
    assert wait_ms(FusedJudge(TurnTaking(), fitted), unfinished) >= 1500
    assert wait_ms(FusedJudge(TurnTaking(), fitted), turn(0.6, 0.5)) <= 400


def test_the_weights_print_as_the_setting_takes_them() -> None:
    fitted = FusedWeights(bias=8.84, words=8.0, smart_turn=0.0, sure_wait_ms=200,
                          unsure_wait_ms=2000, hearing=0.5)  # fmt: skip
    assert fused_weights(fitted.spec) == fitted
    assert fitted.spec == (
        "bias=8.84,words=8.0,smart_turn=0.0,sure_wait_ms=200,unsure_wait_ms=2000,hearing=0.5"
    )


def test_a_call_gets_the_fused_judge_only_with_a_words_judge() -> None:
    assert isinstance(judge_for(TurnTaking(), words=True), FusedJudge)
    assert isinstance(judge_for(TurnTaking(), words=False), VoiceJudge)


@pytest.mark.parametrize(
    ("heard", "judged"),
    [
        ("I'd like a table for two.", "I'd like a table for two"),
        ("Is it open?", "Is it open"),
        ("Well, I was going to...", "Well, I was going to"),
        ("  Yes!  ", "Yes"),
        ("Um, the -", "Um, the"),
        ("...", ""),
    ],
)
def test_the_words_judge_reads_the_words_without_whispers_ending(heard: str, judged: str) -> None:
    assert judged_words(heard) == judged


def test_the_prompt_is_chatml_left_open_after_the_callers_words() -> None:
    prompt = turn_prompt("How can I help?", "I need a taxi")
    assert prompt.endswith("<|im_start|>user\nI need a taxi")
    assert "<|im_start|>assistant\nHow can I help?<|im_end|>" in prompt
    assert turn_prompt("", "hello") == "<|im_start|>user\nhello"


# --- the evaluator asks the words judge -----------------------------------------------------


class _Words:
    def __init__(self, score: float = 0.7, fail: bool = False) -> None:
        self.asked: list[tuple[str, str]] = []
        self.score, self.fail = score, fail

    def complete(self, bot_line: str, words: str) -> float:
        if self.fail:
            raise RuntimeError("model gone")
        self.asked.append((bot_line, words))
        return self.score


class _Stt:
    def __init__(self, text: str) -> None:
        self.text = text

    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        return Transcript(text=self.text, no_speech_prob=0.01, avg_logprob=-0.2)


class _SmartTurn:
    def __init__(self) -> None:
        self.runs = 0

    def predict(self, audio_16k: np.ndarray) -> float:
        self.runs += 1
        return 0.4


async def _inline(stage: str, fn: Callable[..., T], /, *args: Any) -> T:
    return fn(*args)


def _evaluator(
    text: str, words: _Words | None, *, voice: bool = True, smart_turn: _SmartTurn | None = None
) -> TurnEvaluator:
    evaluator = TurnEvaluator(
        end_of_turn=smart_turn or _SmartTurn(),
        stt=_Stt(text),
        run=_inline,
        words=words,
        bot_line=lambda: "What can I do for you?",
        voice=voice,
    )
    evaluator.audio.add(0, np.full(16000, 0.1, np.float32))
    return evaluator


async def test_the_evaluation_carries_the_words_judges_score_in_the_bots_context() -> None:
    words = _Words(0.7)
    result = await _evaluator("I need a taxi.", words).evaluate_now(
        Evaluate(0, 16000, speech_ms=900)
    )
    assert isinstance(result, Evaluation)
    assert result.words == 0.7 and result.probability == 0.4
    assert words.asked == [("What can I do for you?", "I need a taxi.")]


async def test_without_words_the_words_judge_is_not_asked() -> None:
    words = _Words()
    result = await _evaluator("", words).evaluate_now(Evaluate(0, 16000, speech_ms=900))
    assert isinstance(result, Evaluation) and result.words is None
    assert words.asked == []


async def test_a_failing_words_judge_costs_the_turn_only_its_score() -> None:
    result = await _evaluator("I need a taxi.", _Words(fail=True)).evaluate_now(
        Evaluate(0, 16000, speech_ms=900)
    )
    assert isinstance(result, Evaluation)
    assert result.text == "I need a taxi." and result.words is None


# --- Smart Turn runs where its score counts ---------------------------------------------


async def test_smart_turn_is_not_run_on_words_the_judge_scores_when_it_has_no_weight() -> None:
    smart_turn = _SmartTurn()
    evaluator = _evaluator("I need a taxi.", _Words(0.7), voice=False, smart_turn=smart_turn)
    result = await evaluator.evaluate_now(Evaluate(0, 16000, speech_ms=900))
    assert isinstance(result, Evaluation)
    assert result.words == 0.7 and result.probability is None
    assert smart_turn.runs == 0


@pytest.mark.parametrize(
    ("heard", "words"), [("I need a taxi.", _Words(fail=True)), ("", _Words(0.7))]
)
async def test_smart_turn_is_not_run_without_weight_even_where_the_words_give_no_score(
    heard: str, words: _Words
) -> None:
    """Those turns wait on the silence (the fused judge's fallback follows the weights)."""
    smart_turn = _SmartTurn()
    evaluator = _evaluator(heard, words, voice=False, smart_turn=smart_turn)
    result = await evaluator.evaluate_now(Evaluate(0, 16000, speech_ms=900))
    assert isinstance(result, Evaluation)
    assert result.words is None and result.probability is None
    assert smart_turn.runs == 0


async def test_smart_turn_always_runs_without_a_words_judge() -> None:
    smart_turn = _SmartTurn()
    evaluator = _evaluator("I need a taxi.", None, voice=False, smart_turn=smart_turn)
    result = await evaluator.evaluate_now(Evaluate(0, 16000, speech_ms=900))
    assert isinstance(result, Evaluation) and result.probability == 0.4
    assert smart_turn.runs == 1


async def test_a_process_without_smart_turn_judges_the_turns_it_would_not_weigh() -> None:
    evaluator = TurnEvaluator(
        end_of_turn=None, stt=_Stt("I need a taxi."), run=_inline, words=_Words(0.7), voice=False
    )
    evaluator.audio.add(0, np.full(16000, 0.1, np.float32))
    result = await evaluator.evaluate_now(Evaluate(0, 16000, speech_ms=900))
    assert isinstance(result, Evaluation) and result.words == 0.7


@pytest.mark.parametrize(("words", "voice"), [(None, False), (_Words(0.7), True)])
def test_a_judge_that_weighs_smart_turn_cannot_be_built_without_it(
    words: _Words | None, voice: bool
) -> None:
    with pytest.raises(ValueError, match="Smart Turn"):
        TurnEvaluator(end_of_turn=None, stt=_Stt(""), run=_inline, words=words, voice=voice)


def test_smart_turn_is_loaded_only_where_a_calls_judge_would_run_it() -> None:
    assert smart_turn_needed("voice")
    assert not smart_turn_needed("words"), "the shipped fused weights give it no weight"
    weighed = replace(TurnTaking().fused, smart_turn=0.5)
    assert smart_turn_needed("words", weighed)
    assert smart_turn_needed("words", fused_weights("smart_turn=0.5"))


class _Broken:
    """A model whose runtime fails, as onnxruntime and CTranslate2 raise: plain errors."""

    def predict(self, audio_16k: np.ndarray) -> float:
        raise RuntimeError("onnxruntime: bad input")

    def transcribe(self, audio_16k: np.ndarray, context: str = "") -> Transcript:
        raise ValueError("decoder state lost")


@pytest.mark.parametrize("words", [_Words(0.7), None])
async def test_a_failing_smart_turn_fails_the_evaluation_as_its_stage(words: _Words | None) -> None:
    evaluator = _evaluator("I need a taxi.", words, voice=True)
    evaluator.end_of_turn = _Broken()
    result = await evaluator.evaluate_now(Evaluate(0, 16000, speech_ms=900))
    assert isinstance(result, BackendError) and result.stage == "end_of_turn"


async def test_a_transcription_that_fails_any_way_fails_the_evaluation_not_the_call() -> None:
    evaluator = _evaluator("I need a taxi.", _Words(0.7))
    evaluator.stt = _Broken()
    result = await evaluator.evaluate_now(Evaluate(0, 16000, speech_ms=900))
    assert isinstance(result, BackendError) and result.stage == "stt"


def test_the_fitted_weights_say_whether_smart_turn_counts() -> None:
    fitted = TurnTaking().fused
    assert fitted.hears_the_voice is (fitted.smart_turn != 0.0)
    assert replace(fitted, smart_turn=0.5).hears_the_voice
    assert not replace(fitted, smart_turn=0.0).hears_the_voice


def test_the_fused_judge_reads_a_score_not_taken_as_no_sign_either_way() -> None:
    judge = FusedJudge(TurnTaking(), replace(TurnTaking().fused, smart_turn=1.0))
    assert judge.features(0.7, None) == judge.features(0.7, 0.5)


def test_words_whisper_doubts_wait_longer_when_the_weights_count_its_doubt() -> None:
    weights = replace(WEIGHTS, smart_turn=0.0, hearing=2.0)
    judge = FusedJudge(TurnTaking(), weights)
    sure = turn(0.8, 0.5)
    doubted = replace(sure, result=replace(sure.result, avg_logprob=-1.2))
    assert wait_ms(judge, sure) < wait_ms(judge, doubted)
    deaf = FusedJudge(TurnTaking(), replace(weights, hearing=0.0))
    assert wait_ms(deaf, sure) == wait_ms(deaf, doubted)
