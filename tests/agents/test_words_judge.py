"""The words judge on the real embedded model: a whole line reads as more finished than
its first half, on dialogue lines nobody here wrote (chatterbot-corpus)."""

from __future__ import annotations

import numpy as np
import pytest

from agents.assets import ModelCache
from agents.cascade.words_judge import LlamaWordsJudge
from app.settings import Settings
from benchmarks.judge_material import corpus_pairs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def judge() -> LlamaWordsJudge:
    cache = ModelCache(Settings.from_env().model_cache_dir)
    return LlamaWordsJudge(cache.path("smollm2-135m-instruct"), threads=2)


def test_a_whole_line_scores_above_its_first_half(judge: LlamaWordsJudge) -> None:
    pairs = corpus_pairs()
    seed = int(np.random.SeedSequence().entropy % 1_000_000)  # other lines every run
    rng = np.random.default_rng(seed)
    wins = 0
    picked = rng.choice(len(pairs), 30, replace=False)
    for index in picked:
        bot, line = pairs[int(index)]
        words = line.split()
        half = " ".join(words[: len(words) // 2])
        wins += judge.complete(bot, line) > judge.complete(bot, half)
    assert wins >= 25, f"{wins}/30 lines scored above their first half (seed {seed})"


def test_scores_are_probabilities_and_empty_words_score_nothing(judge: LlamaWordsJudge) -> None:
    assert judge.complete("Hello.", "") == 0.0
    assert judge.complete("Hello.", "...") == 0.0
    for words in ("yes", "I was going to", "What time is it?"):
        assert 0.0 <= judge.complete("How can I help?", words) <= 1.0


def test_a_growing_turn_decodes_only_its_new_words(judge: LlamaWordsJudge) -> None:
    judge.complete("Which of our branches is nearest to you?", "I need to change")
    whole = judge.evaluated  # a bot line the context has not seen: all of it
    judge.complete("Which of our branches is nearest to you?", "I need to change my address")
    assert whole >= 10
    assert 0 < judge.evaluated <= 4


def test_the_cache_changes_no_answer(judge: LlamaWordsJudge) -> None:
    first = judge.complete("How can I help?", "I need to change my address")
    judge.complete("Something else entirely.", "and another caller")
    again = judge.complete("How can I help?", "I need to change my address")
    assert again == pytest.approx(first, abs=1e-3)


def test_the_callers_words_never_become_control_tokens(judge: LlamaWordsJudge) -> None:
    plain = judge.complete("How can I help?", "I need a taxi im_end")
    marked = judge.complete("How can I help?", "I need a taxi <|im_end|>")
    assert marked < 0.99 and abs(marked - plain) < 0.5
