"""Material nobody here wrote, drawn fresh per seed: corpus lines, cut and paused at word
boundaries, in random voices; calls dealt into a tuning and a held-out half."""

from __future__ import annotations

import numpy as np

from benchmarks.judge_material import ESPEAK_VARIANTS, ESPEAK_VOICES, corpus_pairs, draw
from benchmarks.turns.corpus import BACKCHANNELS, TURNS_PER_CALL, corpus_scripts, halves
from benchmarks.turns.script import Kind
from ops.simulate import After


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
    assert len(scripts) == 8
    for script in scripts:
        lines = [say for say in script.turns if say.after is not After.BOT_SPEAKING]
        assert len(lines) == TURNS_PER_CALL and len(script.turns) <= TURNS_PER_CALL + 1
    half_of = halves(3, scripts)
    assert sorted(half_of.values()) == ["held-out"] * 4 + ["tuning"] * 4
    paused = [say for s in scripts for say in s.turns if say.kind is Kind.PAUSE]
    assert paused, "most lines carry a pause"
    for say in paused:
        first, pause_ms, rest = say.parts
        assert isinstance(pause_ms, int) and 400 <= pause_ms <= 1800
        assert isinstance(first, str) and isinstance(rest, str) and first and rest


def test_corpus_calls_speak_over_replies_at_random_points() -> None:
    scripts = corpus_scripts(seed=11, calls=40)
    over = [(s, say) for s in scripts for say in s.turns if say.after is After.BOT_SPEAKING]
    kinds = {say.kind for _, say in over}
    assert kinds == {Kind.BACKCHANNEL, Kind.INTERRUPTION}, "both kinds are drawn"
    assert len(over) <= len(scripts), "at most one per call"
    delays = {say.delay_ms for _, say in over}
    assert len(delays) > len(over) // 2, "at random points of the reply, not a fixed one"
    for script, say in over:
        # Over the reply to a line the caller said, and with a second of it still to come.
        assert 0 < script.turns.index(say) < TURNS_PER_CALL
        assert say.queued_min_ms is not None and say.queued_min_ms >= 1000
        if say.kind is Kind.BACKCHANNEL:  # more to come than the scorer's 1.5 s window
            assert say.queued_min_ms > 1500
        if say.kind is Kind.BACKCHANNEL:
            assert say.parts[0] in BACKCHANNELS
        else:
            [line] = say.parts
            assert isinstance(line, str) and len(line.split()) >= 3
            others = [t.text for t in script.turns if t is not say]
            assert line not in others, "an interruption says a line of its own"


def test_over_every_reply_speaks_over_each_of_the_first_three_replies() -> None:
    scripts = corpus_scripts(seed=11, calls=12, over_every_reply=True)
    for script in scripts:
        after = [say.after is After.BOT_SPEAKING for say in script.turns]
        # line, over its reply, line, over, line, over, line
        assert after == [False, True, False, True, False, True, False], script.name
        over = [say for say in script.turns if say.after is After.BOT_SPEAKING]
        interruptions = [say.parts[0] for say in over if say.kind is Kind.INTERRUPTION]
        assert len(set(interruptions)) == len(interruptions), "each a line of its own"
    kinds = [say.kind for s in scripts for say in s.turns if say.after is After.BOT_SPEAKING]
    assert {Kind.BACKCHANNEL, Kind.INTERRUPTION} == set(kinds)
