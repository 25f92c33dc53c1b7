"""`bench turns --hear-said`: a transcription server that hears the words the caller said.

It answers the bot's STT_URL requests (OpenAI's "Create transcription" API, as
agents/cascade/hosted_stt.py sends them: a WAV of the turn's audio so far, answered in
`verbose_json`) with the words the bench's caller said inside that audio, read from the
script, not from the audio. It is no model: it is how the turn judge, the backchannel
rule and the timing do when hearing is perfect, the best a hosted Whisper could give, so
the part of the targets that hearing costs is measured through the calls themselves.

The audio's place on the call is known from time alone: the bench places one call at a
time, each caller turn's start is reported as its first frame goes out
(`SimulationConfig.on_turn_start`), and a request's audio ends when it arrives (the bot
sends the audio it has; the caller's frames reach it within a frame). It began as far
back as its length reaches, counting each pause between two stretches of the caller's
speech as the bot's STT hears it, cut to `LONG_PAUSE_KEPT_MS` (agents/turns/audio.py),
and the pause at its end whole. A word is heard once all of it lies in the audio; its
place inside a stretch of speech is its share of the stretch, words spread evenly.
"""

from __future__ import annotations

import io
import threading
import time
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents.turns.audio import LONG_PAUSE_KEPT_MS
from benchmarks.turns.script import Said

__all__ = ["SAID_MODEL", "WordsSaid", "said_stt_app"]

# The model name the bot's record shows for this hearing.
SAID_MODEL = "words-said"
# The caller's first frame goes out one tick after its turn is announced.
FRAME_S = 0.020
# A word's end may be this far past the audio's end and still count as heard: the
# bot's last frame of it is still on its way when the request leaves.
END_SLACK_S = 0.020


@dataclass(frozen=True)
class _Word:
    start: float  # time.monotonic() seconds
    end: float
    text: str


class WordsSaid:
    """Every word the caller said on the current call, placed in wall-clock time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._words: list[_Word] = []
        self._speech: list[tuple[float, float]] = []  # the stretches of speech, in order
        self._lock = threading.Lock()  # the caller's thread adds, the server's reads

    def new_call(self) -> None:
        with self._lock:
            self._words, self._speech = [], []

    def turn_started(self, said: Sequence[Said], *, after_s: float = FRAME_S) -> None:
        """A caller turn whose first sample reaches the line `after_s` from now."""
        start = self._clock() + after_s
        words: list[_Word] = []
        speech: list[tuple[float, float]] = []
        for stretch in said:
            texts = stretch.text.split()
            span = (stretch.end_ms - stretch.start_ms) / 1000
            at = start + stretch.start_ms / 1000
            speech.append((at, at + span))
            for index, text in enumerate(texts):
                first = at + span * index / len(texts)
                words.append(_Word(first, first + span / len(texts), text))
        with self._lock:
            self._words += words
            self._speech = sorted(self._speech + speech)

    def heard(self, audio_s: float) -> str:
        """The words said wholly inside audio of `audio_s` seconds the bot's STT sent now."""
        end = self._clock()
        with self._lock:
            words = list(self._words)
            start = self._began(end, audio_s)
        return " ".join(
            w.text for w in words if (w.start + w.end) / 2 >= start and w.end <= end + END_SLACK_S
        )

    def _began(self, end: float, audio_s: float) -> float:
        """Where on the call audio of `audio_s` s that ends at `end` began."""
        kept = LONG_PAUSE_KEPT_MS / 1000
        left, at = audio_s, end
        for first, last in reversed([s for s in self._speech if s[0] < end]):
            last = min(last, end)
            pause = max(at - last, 0.0)
            heard = pause if at == end else min(pause, kept)  # the pause at its end: whole
            if left <= heard:
                return at - left
            left -= heard
            if left <= last - first:
                return last - left
            left -= last - first
            at = first
        return at - left


def _wav_seconds(data: bytes) -> float:
    with wave.open(io.BytesIO(data), "rb") as wav:
        return wav.getnframes() / wav.getframerate()


def said_stt_app(words: WordsSaid) -> Starlette:
    """POST /audio/transcriptions, answered from `words` in OpenAI's verbose JSON."""

    async def transcriptions(request: Request) -> JSONResponse:
        async with request.form() as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                return JSONResponse({"error": {"message": "file is required"}}, status_code=400)
            try:
                seconds = _wav_seconds(await upload.read())
            except (wave.Error, EOFError) as exc:
                return JSONResponse({"error": {"message": f"not a WAV: {exc}"}}, status_code=400)
        text = words.heard(seconds)
        segments: list[dict[str, Any]] = []
        if text:
            segments.append(
                {
                    "id": 0,
                    "start": 0.0,
                    "end": seconds,
                    "text": text,
                    "tokens": [],
                    "avg_logprob": 0.0,
                    "no_speech_prob": 0.0,
                }
            )
        return JSONResponse(
            {
                "task": "transcribe",
                "language": "english",
                "duration": seconds,
                "text": text,
                "segments": segments,
            }
        )

    return Starlette(routes=[Route("/audio/transcriptions", transcriptions, methods=["POST"])])
