"""Calls nobody here wrote: `python -m benchmarks turns --corpus N` builds N calls fresh
for each run from the English dialogues of chatterbot-corpus.

Each call has one random caller voice (espeak-ng voices and variants at 120-210 words a
minute, or the bundled Piper voice at 130-200) and four caller lines. Most lines are
paused for 0.4-1.8 s at a random word boundary, so what comes before the pause is an
unfinished turn by construction; the others are said whole. The calls are dealt into a
tuning half and a held-out half; report the held-out half, and fit nothing on it.
"""

from __future__ import annotations

import numpy as np

from benchmarks.judge_material import ESPEAK_VARIANTS, ESPEAK_VOICES, corpus_pairs
from benchmarks.turns.script import Kind, Say, Script, Voice

__all__ = ["TURNS_PER_CALL", "corpus_scripts", "halves"]

TURNS_PER_CALL = 4
PAUSED_SHARE = 0.6


def _voice(rng: np.random.Generator) -> Voice:
    if rng.random() < 0.3:
        return Voice("piper", int(rng.integers(130, 201)))
    name = str(rng.choice(ESPEAK_VOICES)) + str(rng.choice(ESPEAK_VARIANTS))
    return Voice("espeak", int(rng.integers(120, 211)), name)


def _line(rng: np.random.Generator, line: str) -> Say:
    words = line.split()
    if len(words) >= 4 and rng.random() < PAUSED_SHARE:
        cut = int(rng.integers(1, len(words)))
        pause_ms = int(rng.integers(400, 1801))
        return Say(Kind.PAUSE, (" ".join(words[:cut]), pause_ms, " ".join(words[cut:])))
    return Say(Kind.QUESTION, (line,))


def corpus_scripts(seed: int, calls: int) -> list[Script]:
    rng = np.random.default_rng(seed)
    pairs = corpus_pairs()
    most = len(pairs) // TURNS_PER_CALL
    if not 1 <= calls <= most:
        raise SystemExit(f"--corpus: 1 to {most} calls (the corpus has {len(pairs)} lines)")
    picks = rng.choice(len(pairs), size=calls * TURNS_PER_CALL, replace=False)
    scripts = []
    for call in range(calls):
        lines = [
            pairs[int(i)][1] for i in picks[call * TURNS_PER_CALL : (call + 1) * TURNS_PER_CALL]
        ]
        scripts.append(
            Script(
                f"corpus-{call:02d}",
                tuple(_line(rng, line) for line in lines),
                voice=_voice(rng),
            )
        )
    return scripts


def halves(seed: int, scripts: list[Script]) -> dict[str, str]:
    """Each call's half, "tuning" or "held-out", dealt by the seed."""
    order = np.random.default_rng([seed, 1]).permutation(len(scripts))
    tuning = {int(i) for i in order[: len(scripts) // 2]}
    return {s.name: "tuning" if i in tuning else "held-out" for i, s in enumerate(scripts)}
