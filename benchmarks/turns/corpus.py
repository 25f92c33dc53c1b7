"""Calls nobody here wrote: `python -m benchmarks turns --corpus N` builds N calls fresh
for each run from the English dialogues of chatterbot-corpus.

Each call has one random caller voice (espeak-ng voices and variants at 120-210 words a
minute, or the bundled Piper voice at 130-200) and four caller lines. Most lines are
paused for 0.4-1.8 s at a random word boundary, so what comes before the pause is an
unfinished turn by construction; the others are said whole. espeak-ng says a paused line
as one sentence with an SSML break, its intonation carrying on across the pause as a
person's does mid-sentence; Piper, which reads no SSML, says the two parts apart.

A quarter of the calls (rounded; `--recorded-share` sets another share) are people
instead: each line is an utterance of the recordings moonshine-voice ships
(`benchmarks.turns.recordings`), one sentence, paused the same way at a random gap
between the reader's words, or said as recorded. A recorded caller's backchannel is
the Piper voice's (the recordings hold none).

Over the bot's reply to one of its first three lines, most calls also speak once more:
a backchannel, or another corpus line that interrupts, at a random point of the reply
(while enough of it is still to come to tell a stop from its end). An interruption has
a line's words at least (three), recorded or not (where a recorded call has such an
utterance): a "Yes." is a backchannel. With
`--over-every-reply`, every call speaks over each reply to its first three lines, for
three times as many to measure. Backchannels are the
commonest forms of the Switchboard corpus's "acknowledge (backchannel)" act (Jurafsky,
Shriberg and Biasca, SWBD-DAMSL coders manual, 1997): a closed class, not our sentences.

The calls are dealt into a tuning half and a held-out half; report the held-out half,
and fit nothing on it.
"""

from __future__ import annotations

import numpy as np

from benchmarks.judge_material import (
    ESPEAK_VARIANTS,
    ESPEAK_VOICES,
    MIN_LINE_WORDS,
    corpus_pairs,
)
from benchmarks.turns.recordings import PACKAGE, Clip, Recordings, Utterance
from benchmarks.turns.script import RECORDED, Kind, Part, Say, Script, Voice
from ops.simulate import After

__all__ = ["BACKCHANNELS", "RECORDED_SHARE", "TURNS_PER_CALL", "corpus_scripts", "halves"]

TURNS_PER_CALL = 4
PAUSED_SHARE = 0.6
OVERLAP_SHARE = 0.8  # calls that also speak over one reply
BACKCHANNEL_SHARE = 0.5  # of those, a backchannel (else an interruption)
RECORDED_SHARE = 0.25  # calls whose caller is a recorded person
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


def _recorded_line(rng: np.random.Generator, utterance: Utterance) -> Say:
    clip = utterance.clip
    points = utterance.split_points()
    if points and rng.random() < PAUSED_SHARE:
        at = int(rng.choice(points))
        pause_ms = int(rng.integers(400, 1801))
        first, rest = Clip(clip.recording, clip.start_ms, at), Clip(clip.recording, at, clip.end_ms)
        return Say(Kind.PAUSE, (first, pause_ms, rest))
    return Say(Kind.QUESTION, (clip,))


def _over_reply(rng: np.random.Generator, line: Part, *, recorded: bool = False) -> Say:
    """A backchannel or an interruption (`line`, said whole) at a random point of a reply."""
    delay = int(rng.integers(OVER_REPLY_DELAY_MS[0], OVER_REPLY_DELAY_MS[1] + 1))
    voice = None
    said: Part
    if rng.random() < BACKCHANNEL_SHARE:
        kind, said = Kind.BACKCHANNEL, str(rng.choice(BACKCHANNELS))
        if recorded:
            voice = Voice("piper", int(rng.integers(130, 201)))
    else:
        kind, said = Kind.INTERRUPTION, line
    return Say(
        kind,
        (said,),
        After.BOT_SPEAKING,
        delay,
        queued_min_ms=STILL_TO_COME_MS[kind],
        where="random",
        voice=voice,
    )


def corpus_scripts(
    seed: int,
    calls: int,
    recordings: Recordings | None = None,
    recorded_share: float = RECORDED_SHARE,
    *,
    over_every_reply: bool = False,
) -> list[Script]:
    """`calls` calls drawn by `seed`: `recorded_share` of them (a quarter unless told)
    recorded people, unless `recordings` is None (then all are synthesised).

    `over_every_reply`: every call speaks over each reply to its first three lines, not
    over one reply of most calls: three times the backchannels and interruptions, for
    measuring what they cost (a seed draws other calls this way)."""
    if not 0.0 <= recorded_share <= 1.0:
        raise SystemExit(f"--recorded-share: 0 to 1, not {recorded_share}")
    rng = np.random.default_rng(seed)
    pairs = corpus_pairs()
    overlaps = TURNS_PER_CALL - 1 if over_every_reply else 1
    # The last lines: an interruption's words, if one is drawn.
    per_call = TURNS_PER_CALL + overlaps
    most = len(pairs) // per_call
    if not 1 <= calls <= most:
        raise SystemExit(f"--corpus: 1 to {most} calls (the corpus has {len(pairs)} lines)")
    picks = rng.choice(len(pairs), size=calls * per_call, replace=False)
    # The recorded calls' own draws: the synthesised calls of a seed stay as they were.
    people = np.random.default_rng([seed, 2])
    utterances = recordings.utterances if recordings is not None else []
    unused = list(people.permutation(len(utterances)))
    # The share exactly (halves rounded up), not on average: a 16-call run drew none at
    # 1 in 100.
    share = int(calls * recorded_share + 0.5) if len(utterances) >= per_call else 0
    recorded = set(people.permutation(calls)[:share].tolist())
    scripts = []
    for call in range(calls):
        drawn = [pairs[int(i)][1] for i in picks[call * per_call : (call + 1) * per_call]]
        lines, spares = drawn[:TURNS_PER_CALL], drawn[TURNS_PER_CALL:]
        turns = [_line(rng, line) for line in lines]
        # Over the reply to one of the first three lines (or to each): the fourth's reply
        # may be cut short by the caller's hang-up.
        at: list[int] = []
        if over_every_reply:
            at = list(range(1, TURNS_PER_CALL))
        elif rng.random() < OVERLAP_SHARE:
            at = [int(rng.integers(1, TURNS_PER_CALL))]
        for where, spare in reversed(list(zip(at, spares, strict=False))):
            turns.insert(where, _over_reply(rng, spare))
        voice = _voice(rng)
        if call in recorded:  # (none without enough utterances: share 0)
            # Each utterance once in a run while there are enough of them.
            if len(unused) < per_call:
                unused = list(people.permutation(len(utterances)))
            said = _interruptions_with_words(
                [utterances[int(unused.pop())] for _ in range(per_call)], spoken=len(at)
            )
            turns = [_recorded_line(people, u) for u in said[:TURNS_PER_CALL]]
            spoken_over = said[TURNS_PER_CALL:]
            for where, over in reversed(list(zip(at, spoken_over, strict=False))):
                turns.insert(where, _over_reply(people, over.clip, recorded=True))
            voice = Voice(RECORDED, 0, PACKAGE.split("==")[0])
        scripts.append(Script(f"corpus-{call:02d}", tuple(turns), voice=voice))
    return scripts


def _interruptions_with_words(said: list[Utterance], *, spoken: int) -> list[Utterance]:
    """A recorded call's utterances (its lines, then those it may say over replies), with
    a line's words at least (MIN_LINE_WORDS, as the synthesised callers' interruptions
    have) in each of the first `spoken` places over a reply, the ones said: swapped with
    the call's last line that has them, where it has one. (A place whose draw turns out a
    backchannel says a synthesised word instead.) A recorded "Yes." drawn as an
    interruption was scored as one the bot did not stop for when it went on over it, as
    over any backchannel: seconds of "bot audio after an interruption", the p90 of seed
    374900's runs (docs/benchmarks.md)."""
    lines, over = said[:TURNS_PER_CALL], said[TURNS_PER_CALL:]
    for i, utterance in enumerate(over[:spoken]):
        if _words(utterance) >= MIN_LINE_WORDS:
            continue
        long_enough = [j for j, line in enumerate(lines) if _words(line) >= MIN_LINE_WORDS]
        if long_enough:
            j = long_enough[-1]
            lines[j], over[i] = over[i], lines[j]
    return lines + over


def _words(utterance: Utterance) -> int:
    return len(utterance.text.split())


def halves(seed: int, scripts: list[Script]) -> dict[str, str]:
    """Each call's half, "tuning" or "held-out", dealt by the seed: each kind of caller
    (espeak-ng, Piper, recorded) split between the halves, so the held-out half has
    its share of each."""
    rng = np.random.default_rng([seed, 1])
    half_of: dict[str, str] = {}
    extra = 0  # which half an odd group's extra call goes to, in turn
    for engine in sorted({s.voice.engine for s in scripts}):
        names = [s.name for s in scripts if s.voice.engine == engine]
        tuning = (len(names) + extra) // 2
        extra ^= len(names) % 2
        for rank, i in enumerate(rng.permutation(len(names))):
            half_of[names[int(i)]] = "tuning" if rank < tuning else "held-out"
    return {s.name: half_of[s.name] for s in scripts}
