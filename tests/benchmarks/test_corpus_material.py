"""Material nobody here wrote, drawn fresh per seed: corpus lines, cut and paused at word
boundaries, in random voices; calls dealt into a tuning and a held-out half."""

from __future__ import annotations

import numpy as np

from benchmarks.judge_material import ESPEAK_VARIANTS, ESPEAK_VOICES, corpus_pairs, draw
from benchmarks.turns.corpus import TURNS_PER_CALL, corpus_scripts, halves
from benchmarks.turns.script import Kind


def test_the_corpus_gives_hundreds_of_speakable_caller_lines_with_context() -> None:
    pairs = corpus_pairs()
    assert len(pairs) > 300
    for bot, line in pairs:
        assert bot.strip() and 3 <= len(line.split()) <= 24
        assert "`" not in line and "\n" not in line


def test_each_line_is_cut_at_a_word_boundary_with_a_pause_of_0_4_to_1_8_s() -> None:
    items = draw(np.random.default_rng(5), 50, corpus_pairs())
    assert len({i.caller for i in items}) == 50
    for item in items:
        assert f"{item.prefix} {item.rest}" == " ".join(item.caller.split())
        assert item.prefix and item.rest
        assert 0.4 <= item.pause_s <= 1.8
        if item.engine == "espeak":
            assert any(
                item.voice == v + variant for v in ESPEAK_VOICES for variant in ESPEAK_VARIANTS
            )


def test_the_same_seed_draws_the_same_material_and_another_seed_other_material() -> None:
    pairs = corpus_pairs()
    assert draw(np.random.default_rng(9), 20, pairs) == draw(np.random.default_rng(9), 20, pairs)
    assert draw(np.random.default_rng(9), 20, pairs) != draw(np.random.default_rng(10), 20, pairs)


def test_corpus_calls_are_dealt_into_two_halves() -> None:
    scripts = corpus_scripts(seed=3, calls=8)
    assert len(scripts) == 8 and all(len(s.turns) == TURNS_PER_CALL for s in scripts)
    half_of = halves(3, scripts)
    assert sorted(half_of.values()) == ["held-out"] * 4 + ["tuning"] * 4
    paused = [say for s in scripts for say in s.turns if say.kind is Kind.PAUSE]
    assert paused, "most lines carry a pause"
    for say in paused:
        first, pause_ms, rest = say.parts
        assert isinstance(pause_ms, int) and 400 <= pause_ms <= 1800
        assert isinstance(first, str) and isinstance(rest, str) and first and rest
