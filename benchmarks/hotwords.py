"""`python -m benchmarks hotwords` — do the words an operator expects callers to say, given
to Whisper (STT_HOTWORDS), help it hear them?

    python -m benchmarks hotwords [--trials 10] [--seed N] [--json out.json]

Material, fresh for each run from one seed: the lines of chatterbot-corpus's English
dialogues that name something (a capitalised word that the corpus never writes in lower
case: "Gutenberg", "Moravec", "IBM"), which nobody here
wrote. Each is said in a random espeak-ng voice and variant at 120-210 wpm, or by Piper
(a third), on a clean line or under six-talker babble at 15 dB, through 8 kHz mu-law,
with a call's quiet around it. A trial is one operator: its vocabulary is the names of
ten lines its callers say and of ten lines they do not (an operator lists more than any
one caller uses), in a random order. Whisper tiny.en hears each line twice, without and
with the vocabulary.

Measured, without and with: the share of the named words heard (case aside), the word
error rate of the whole line, the lines a call would answer (Whisper's evidence, as
`stt.assess` weighs it), and what Whisper writes over 2 s of babble with no caller at
all: a vocabulary word written there, or words a call would answer, is a caller heard
saying what they did not.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from dataclasses import asdict, dataclass

import numpy as np

from benchmarks.hearing import wer
from benchmarks.judge_material import (
    BABBLE_SNR_DB,
    ESPEAK_VARIANTS,
    ESPEAK_VOICES,
    LINES,
    corpus_pairs,
    on_line,
    to_16k,
)
from benchmarks.provenance import add_seed_and_json, fresh_seed, write_result
from media.codec import mulaw_decode, mulaw_encode
from ops.caller_voice import CallerVoice
from ops.line import active_rms, babble

__all__ = ["Heard", "main", "named_lines", "names_heard", "operator_list"]

RATE = 8000
SAID_PER_TRIAL = 10
UNSAID_PER_TRIAL = 10
NOISE_CLIPS_PER_TRIAL = 2
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'’-]*")
_ENDS = (".", "?", "!")
_QUOTES = "\"'’‘“”)"
_AROUND = ",.?!:;\"()'’‘“”"  # punctuation and quotes around a written word


def _bare(word: str) -> str:
    return re.sub(r"['’]s$", "", word).lower()


def named_lines(lines: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The lines that name something, with the names: capitalised words that no line
    writes in lower case, and that some line capitalises inside a sentence (a sentence's
    first word is capitalised anyway)."""
    lower = {w for line in lines for w in _WORD.findall(line) if w.islower()}
    inside = {
        _bare(bare)
        for line in lines
        for before, word in itertools.pairwise(line.split())
        if (bare := word.strip(_AROUND))[:1].isupper()
        and not before.rstrip(_QUOTES).endswith(_ENDS)
    }
    found = []
    for line in sorted(set(lines)):
        names = []
        for word in line.split():
            bare = word.strip(_AROUND)
            if not bare[:1].isupper() or _bare(bare) not in inside:
                continue
            if _bare(bare) in lower or bare.lower() in lower or _bare(bare) in {"i", "i'm"}:
                continue
            if len(_bare(bare)) >= 2:
                names.append(re.sub(r"['’]s$", "", bare))  # as an operator would write it
        if names:
            found.append((line, tuple(dict.fromkeys(names))))
    return found


def operator_list(said: list[str], seed: int, size: int = 30) -> str:
    """An operator's STT_HOTWORDS for calls whose callers say `said`: the names in those
    of them that are corpus lines (all of them, however many), then names of other
    corpus lines up to `size` in all (an operator lists more than any caller uses), in
    an order drawn by `seed`."""
    named = named_lines([caller for _, caller in corpus_pairs()])
    spoken = {" ".join(line.split()) for line in said}
    names = [name for line, found in named if " ".join(line.split()) in spoken for name in found]
    others = [name for _, found in named for name in found if name not in names]
    rng = np.random.default_rng([seed, 3])
    for i in rng.permutation(len(others)):
        if len(dict.fromkeys(names)) >= size:
            break
        names.append(others[int(i)])
    listed = list(dict.fromkeys(names))
    return ", ".join(listed[int(i)] for i in rng.permutation(len(listed)))


def names_heard(names: tuple[str, ...], text: str) -> int:
    heard = {_bare(w) for w in _WORD.findall(text)}
    return sum(_bare(name) in heard for name in names)


@dataclass(frozen=True)
class Heard:
    """One line heard without and with its trial's vocabulary (or, `line` empty, babble
    with no caller)."""

    trial: int
    line: str
    names: tuple[str, ...]
    voice: str
    condition: str
    plain: str
    prompted: str
    # What a call makes of each (agents/cascade/stt.py `assess`): "heard" is answered.
    plain_hearing: str = ""
    prompted_hearing: str = ""
    listed: tuple[str, ...] = ()  # the trial's list (STT_HOTWORDS), names said or not


def _voice(rng: np.random.Generator) -> tuple[str, int, str]:
    if rng.random() < 1 / 3:
        return "piper", int(rng.integers(130, 201)), "en-us"
    name = str(rng.choice(ESPEAK_VOICES)) + str(rng.choice(ESPEAK_VARIANTS))
    return "espeak", int(rng.integers(120, 211)), name


def _heard_on_a_call(audio_8k: np.ndarray) -> np.ndarray:
    """16 kHz as the STT gets a turn: the agent's 300 ms of preroll before, ~100 ms after."""
    quiet = np.zeros(int(0.3 * RATE), np.int16)
    return to_16k(np.concatenate([quiet, audio_8k, quiet[: RATE // 10]]))


def _babble_alone(caller_level: float, rng: np.random.Generator) -> np.ndarray:
    """2 s of the babble line with no caller on it, as loud as under a caller's speech."""
    noise = babble(2.0, rng)[: 2 * RATE].astype(np.float32)
    gain = caller_level / max(float(np.sqrt(np.mean(noise**2))), 1e-9)
    line = noise * gain / 10 ** (BABBLE_SNR_DB / 20)
    return mulaw_decode(mulaw_encode(np.clip(line, -32768, 32767).astype(np.int16)))


def run(trials: int, seed: int) -> list[Heard]:
    from agents.assets import STT_ASSETS, ModelCache
    from agents.cascade.stt import WhisperTranscriber, assess
    from app.settings import Settings

    rng = np.random.default_rng(seed)
    lines = named_lines([caller for _, caller in corpus_pairs()])
    model = ModelCache(Settings.from_env().model_cache_dir).path(STT_ASSETS["tiny.en"])
    plain = WhisperTranscriber(model, threads=2)
    piper = CallerVoice("piper", 165)
    caller_level = active_rms(CallerVoice("espeak", 160).speak("One two three four five."))
    heard: list[Heard] = []
    for trial in range(trials):
        picks = rng.choice(len(lines), size=SAID_PER_TRIAL + UNSAID_PER_TRIAL, replace=False)
        chosen = [lines[int(i)] for i in picks]
        vocabulary = [name for _, names in chosen for name in names]
        order = rng.permutation(len(vocabulary))
        listed = tuple(dict.fromkeys(vocabulary[int(i)] for i in order))
        hotwords = ", ".join(listed)
        prompted = WhisperTranscriber(model, threads=2, hotwords=hotwords)
        said = [(line, names) for line, names in chosen[:SAID_PER_TRIAL]]
        said += [("", ())] * NOISE_CLIPS_PER_TRIAL
        for line, names in said:
            engine, rate, name = _voice(rng)
            condition = str(rng.choice(LINES)) if line else "babble"
            if line:
                voice = piper if engine == "piper" else CallerVoice(engine, rate, name)
                voice.rate_wpm = rate
                audio = on_line(voice.speak(line), condition, rng)
            else:
                audio = _babble_alone(caller_level, rng)
            sound = _heard_on_a_call(audio)
            without, with_words = plain.transcribe(sound), prompted.transcribe(sound)
            speech_ms = audio.size * 1000 // RATE  # as if all of it were speech
            heard.append(
                Heard(
                    trial=trial,
                    line=line,
                    names=names,
                    voice=f"{engine} {name} {rate} wpm" if line else "",
                    condition=condition,
                    plain=without.text,
                    prompted=with_words.text,
                    plain_hearing=assess(without, speech_ms=speech_ms).value,
                    prompted_hearing=assess(with_words, speech_ms=speech_ms).value,
                    listed=listed,
                )
            )
        print(f"  trial {trial + 1}/{trials}", file=sys.stderr, flush=True)
    return heard


def score(heard: list[Heard]) -> dict[str, dict[str, float]]:
    said = [h for h in heard if h.line]
    noise = [h for h in heard if not h.line]
    names = sum(len(h.names) for h in said)
    figures = {}
    for arm in ("plain", "prompted"):
        texts = [getattr(h, arm) for h in said]
        on_noise = [getattr(h, arm) for h in noise]
        figures[arm] = {
            "names": names,
            "names_heard": sum(names_heard(h.names, t) for h, t in zip(said, texts, strict=True)),
            "wer": float(np.mean([wer(h.line, t) for h, t in zip(said, texts, strict=True)])),
            "noise_clips": len(noise),
            "noise_with_words": sum(bool(_WORD.findall(t)) for t in on_noise),
            "noise_heard": sum(getattr(h, f"{arm}_hearing") == "heard" for h in noise),
            "lines_heard": sum(getattr(h, f"{arm}_hearing") == "heard" for h in said),
            "lines": len(said),
            # The trial's list written where nobody said it: over babble alone, or in a
            # line that does not hold that name (what the list makes Whisper invent).
            "noise_with_a_name": sum(
                bool(_unsaid_listed(h, t)) for h, t in zip(noise, on_noise, strict=True)
            ),
            "lines_with_a_name_not_said": sum(
                bool(_unsaid_listed(h, t)) for h, t in zip(said, texts, strict=True)
            ),
            "lines_ending_in_a_comma": sum(t.rstrip().endswith(",") for t in texts),
        }
    return figures


def _unsaid_listed(heard: Heard, text: str) -> set[str]:
    written = {_bare(w) for w in _WORD.findall(text)}
    said = {_bare(w) for w in _WORD.findall(heard.line)}
    return {_bare(n) for n in heard.listed} & written - said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks hotwords", description=__doc__)
    parser.add_argument("--trials", type=int, default=10, help="operators (default 10)")
    add_seed_and_json(parser)
    args = parser.parse_args(argv)
    seed = fresh_seed(args.seed)
    print(f"seed {seed}: {args.trials} trials", file=sys.stderr)
    heard = run(args.trials, seed)
    figures = score(heard)
    print(
        "| Whisper tiny.en | named words heard | WER | lines heard | lines ending in ',' "
        "| lines with a listed name not said | babble alone: with words, a listed name, heard |"
    )
    print("|---|---|---|---|---|---|---|")
    for arm, f in figures.items():
        print(
            f"| {'with the list' if arm == 'prompted' else 'without'} "
            f"| {f['names_heard']}/{f['names']} | {f['wer']:.3f} | {f['lines_heard']}/{f['lines']} "
            f"| {f['lines_ending_in_a_comma']} | {f['lines_with_a_name_not_said']} "
            f"| {f['noise_with_words']}/{f['noise_clips']}, {f['noise_with_a_name']}, "
            f"{f['noise_heard']} |"
        )
    if args.json is not None:
        result = {"seed": seed, "figures": figures, "heard": [asdict(h) for h in heard]}
        write_result(args.json, "hotwords", argv, {"seed": seed}, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
