"""Caller speech nobody here wrote, made fresh for each run of `python -m benchmarks judge`.

- Text: the English dialogues of the `chatterbot-corpus` package. A caller line is a
  line of a dialogue; the line before it is what the bot had just said.
- Each caller line is cut at a random word boundary and paused there for 0.4 to 1.8 s,
  so the words before the pause are an unfinished turn by construction.
- Voices: random espeak-ng voices and variants at 120 to 210 words a minute, the pause
  an SSML break inside one sentence (the voice keeps the sentence's intonation across
  it); or the bundled Piper voice at a random rate, the two parts synthesised apart.
- Lines: clean, or six-talker babble at 15 dB SNR; always 8 kHz G.711 mu-law.
- The corpus's lines are split once and for all into a tuning and a held-out pool (a
  hash of each line): a run's held-out half never holds a line any run has fitted on.

Every draw comes from one seed, printed with the results, so a run can be repeated.
"""

from __future__ import annotations

import itertools
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from media.codec import mulaw_decode, mulaw_encode
from media.resample import resample
from ops.caller_voice import CallerVoice
from ops.line import active_rms, babble

__all__ = ["Item", "Spoken", "corpus_pairs", "draw", "on_line", "pool_of", "speak"]

RATE: Final = 8000
ESPEAK_VOICES: Final = (
    "en-us",
    "en-gb",
    "en-gb-scotland",
    "en-gb-x-rp",
    "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
    "en-029",
)
ESPEAK_VARIANTS: Final = ("", "+m1", "+m3", "+m7", "+f1", "+f2", "+f3", "+f4")
LINES: Final = ("clean", "babble")
# A line a caller could say: words and everyday punctuation (no code, markup or lists).
_SPEAKABLE: Final = re.compile(r"^[A-Za-z][A-Za-z0-9 ,.?!'’-]*$")
BABBLE_SNR_DB: Final = 15.0


@dataclass(frozen=True)
class Item:
    """One caller line, its pause, and how it is spoken."""

    bot: str  # the bot's line before it
    caller: str
    cut: int  # the pause follows this many words
    pause_s: float
    engine: str  # "espeak" or "piper"
    voice: str
    rate_wpm: int
    line: str

    @property
    def prefix(self) -> str:
        return " ".join(self.caller.split()[: self.cut])

    @property
    def rest(self) -> str:
        return " ".join(self.caller.split()[self.cut :])


@dataclass(frozen=True)
class Spoken:
    """An item's audio (int16, 8 kHz, as the line delivers it) and where its pause lies."""

    audio: np.ndarray
    pause_start: int  # samples
    pause_end: int


# A caller's line says this much at least: fewer words ("Yes.", "Oh, right.") are what a
# listener says back, not a turn or an interruption to measure.
MIN_LINE_WORDS: Final = 3


def corpus_pairs() -> list[tuple[str, str]]:
    """(bot line, caller line) from every English dialogue of chatterbot-corpus."""
    import chatterbot_corpus  # the dev dependency: benchmarks only
    import yaml

    folder = Path(chatterbot_corpus.__file__).parent / "data" / "english"
    pairs: list[tuple[str, str]] = []
    for path in sorted(folder.glob("*.yml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for dialogue in data.get("conversations", []):
            lines = [str(line).strip() for line in dialogue if str(line).strip()]
            for before, line in itertools.pairwise(lines):
                words = line.split()
                if MIN_LINE_WORDS <= len(words) <= 24 and _SPEAKABLE.match(line):
                    pairs.append((before, line))
    return sorted(set(pairs))


def pool_of(line: str) -> str:
    """ "tuning" or "held-out": a fixed split of the corpus's lines (by a hash of the
    line), so no run's held-out half holds a line any run has fitted on."""
    return "tuning" if zlib.crc32(" ".join(line.lower().split()).encode()) % 2 else "held-out"


def draw(rng: np.random.Generator, count: int, pairs: list[tuple[str, str]]) -> list[Item]:
    picks = rng.choice(len(pairs), size=min(count, len(pairs)), replace=False)
    items = []
    for index in picks:
        bot, caller = pairs[int(index)]
        words = len(caller.split())
        piper = rng.random() < 0.3
        items.append(
            Item(
                bot=bot,
                caller=caller,
                cut=int(rng.integers(1, words)),
                pause_s=round(float(rng.uniform(0.4, 1.8)), 2),
                engine="piper" if piper else "espeak",
                voice="en-us"
                if piper
                else str(rng.choice(ESPEAK_VOICES)) + str(rng.choice(ESPEAK_VARIANTS)),
                rate_wpm=int(rng.integers(130, 200) if piper else rng.integers(120, 210)),
                line=str(rng.choice(LINES)),
            )
        )
    return items


def speak(item: Item, rng: np.random.Generator, piper: CallerVoice | None = None) -> Spoken:
    if item.engine == "espeak":
        voice = CallerVoice("espeak", item.rate_wpm, item.voice)
    else:
        voice = piper or CallerVoice("piper", item.rate_wpm)
        voice.rate_wpm = item.rate_wpm
    audio, start, end = voice.speak_paused(item.prefix, int(item.pause_s * 1000), item.rest)
    return Spoken(on_line(audio, item.line, rng), start, end)


def on_line(audio: np.ndarray, line: str, rng: np.random.Generator) -> np.ndarray:
    """8 kHz int16 speech as a `line` ("clean", "babble") delivers it."""
    if line != "babble":
        return audio
    speech = audio.astype(np.float32)
    noise = babble(speech.size / RATE + 0.1, rng)[: speech.size]
    # babble() is unit RMS throughout; the speech's level is that of its voiced frames.
    noise_rms = float(np.sqrt(np.mean(noise.astype(np.float64) ** 2)))
    gain = active_rms(speech) / max(noise_rms, 1e-9) / 10 ** (BABBLE_SNR_DB / 20)
    mixed = np.clip(speech + noise * gain, -32768, 32767).astype(np.int16)
    return mulaw_decode(mulaw_encode(mixed))


def to_16k(audio_8k: np.ndarray) -> np.ndarray:
    """What the turn engine's models hear: float32 at 16 kHz."""
    return resample(audio_8k.astype(np.float32) / 32768.0, RATE, 16000)
