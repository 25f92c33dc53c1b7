"""Calls nobody here wrote: `python -m benchmarks turns --corpus N` builds N calls fresh
for each run from the English dialogues of chatterbot-corpus.

Each call has one random caller voice (espeak-ng voices and variants at 120-210 words a
minute, or the bundled Piper voice at 130-200) and four caller lines. Most lines are
paused for 0.4-1.8 s at a random word boundary, so what comes before the pause is an
unfinished turn by construction; the others are said whole.

Over the bot's reply to one of its first three lines, most calls also speak once more:
a backchannel, or another corpus line that interrupts, at a random point of the reply
(while enough of it is still to come to tell a stop from its end). Backchannels are the
commonest forms of the Switchboard corpus's "acknowledge (backchannel)" act (Jurafsky,
Shriberg and Biasca, SWBD-DAMSL coders manual, 1997): a closed class, not our sentences.

The calls are dealt into a tuning half and a held-out half; report the held-out half,
and fit nothing on it.
"""

from __future__ import annotations

import numpy as np

from benchmarks.judge_material import ESPEAK_VARIANTS, ESPEAK_VOICES, corpus_pairs
from benchmarks.turns.script import Kind, Say, Script, Voice
from ops.simulate import After

__all__ = ["BACKCHANNELS", "TURNS_PER_CALL", "corpus_scripts", "halves"]

TURNS_PER_CALL = 4
PAUSED_SHARE = 0.6
OVERLAP_SHARE = 0.8  # calls that also speak over one reply
BACKCHANNEL_SHARE = 0.5  # of those, a backchannel (else an interruption)
# Switchboard's commonest backchannel forms, in writing espeak-ng and Piper can say.
BACKCHANNELS = ("Uh-huh.", "Yeah.", "Right.", "Oh.", "Okay.", "Yes.", "Mm-hmm.", "I see.")
# Said this long after the reply starts, and only while this much of it is still queued:
# an interruption with a second of reply to stop; a backchannel with more than the
# scorer's 1.5 s window after it, so a reply that merely ends is not taken for a stop.
OVER_REPLY_DELAY_MS = (300, 3000)
STILL_TO_COME_MS = {Kind.INTERRUPTION: 1000, Kind.BACKCHANNEL: 2500}


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


def _over_reply(rng: np.random.Generator, line: str) -> Say:
    """A backchannel or an interruption (`line`, said whole) at a random point of a reply."""
    delay = int(rng.integers(OVER_REPLY_DELAY_MS[0], OVER_REPLY_DELAY_MS[1] + 1))
    if rng.random() < BACKCHANNEL_SHARE:
        kind, text = Kind.BACKCHANNEL, str(rng.choice(BACKCHANNELS))
    else:
        kind, text = Kind.INTERRUPTION, line
    return Say(
        kind,
        (text,),
        After.BOT_SPEAKING,
        delay,
        queued_min_ms=STILL_TO_COME_MS[kind],
        where="random",
    )


def corpus_scripts(seed: int, calls: int) -> list[Script]:
    rng = np.random.default_rng(seed)
    pairs = corpus_pairs()
    per_call = TURNS_PER_CALL + 1  # the last: an interruption's words, if one is drawn
    most = len(pairs) // per_call
    if not 1 <= calls <= most:
        raise SystemExit(f"--corpus: 1 to {most} calls (the corpus has {len(pairs)} lines)")
    picks = rng.choice(len(pairs), size=calls * per_call, replace=False)
    scripts = []
    for call in range(calls):
        *lines, spare = [pairs[int(i)][1] for i in picks[call * per_call : (call + 1) * per_call]]
        turns = [_line(rng, line) for line in lines]
        if rng.random() < OVERLAP_SHARE:
            # Over the reply to one of the first three lines: the fourth's reply may be cut
            # short by the caller's hang-up.
            turns.insert(int(rng.integers(1, TURNS_PER_CALL)), _over_reply(rng, spare))
        scripts.append(Script(f"corpus-{call:02d}", tuple(turns), voice=_voice(rng)))
    return scripts


def halves(seed: int, scripts: list[Script]) -> dict[str, str]:
    """Each call's half, "tuning" or "held-out", dealt by the seed."""
    order = np.random.default_rng([seed, 1]).permutation(len(scripts))
    tuning = {int(i) for i in order[: len(scripts) // 2]}
    return {s.name: "tuning" if i in tuning else "held-out" for i, s in enumerate(scripts)}
