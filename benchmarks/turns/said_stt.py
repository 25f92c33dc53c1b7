"""`bench turns --hear-said`: a transcription server that hears the words the caller said.

It answers the bot's STT_URL requests (OpenAI's "Create transcription" API, as
agents/cascade/hosted_stt.py sends them: a WAV of the turn's audio so far, answered in
`verbose_json`) with the words the bench's caller said inside that audio, read from the
script, not from the audio. It is no model: it is how the turn judge, the backchannel
rule and the timing do when hearing is perfect, the best a hosted Whisper could give, so
the part of the targets that hearing costs is measured through the calls themselves.

The audio's place on the call is known from time alone: the bench places one call at a
time, and each caller turn's start is reported as it goes out
(`SimulationConfig.on_turn_start`). The bot sends a turn's audio up to where speech
detection heard the caller stop (or up to now, while they are still talking: a turn
judged without a pause), with each pause between two stretches of speech inside it cut
to `LONG_PAUSE_KEPT_MS` (agents/turns/audio.py `for_words`). So the audio ends where the
caller's last stretch of speech before the request ended, and began as far back as its
length reaches, counted that way; never before the turn's first stretch, and its
preroll (the bot's audio of a turn starts there). A word is heard when its middle lies
in the audio: a turn heard in pieces has each word in one piece. Its place inside a
stretch of speech is its share of the stretch, words spread evenly.
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
# A turn's first sample goes out with the frame sent a tick after it is announced.
FRAME_S = 0.020
# How far a turn's audio reaches back before its first speech (the engine's preroll,
# agents/turns/config.py): never into an earlier turn.
PREROLL_S = 0.3
# The bot asks for a transcription at most about this long after the caller stopped
# (speech detection's 100 ms, then any wait for the models): audio sent later is of
# something else (the bot's echo taken for speech), in which the caller said nothing.
STALE_S = 1.0


@dataclass(frozen=True)
class _Word:
    start: float  # time.monotonic() seconds
    end: float
    text: str

    @property
    def middle(self) -> float:
        return (self.start + self.end) / 2


@dataclass(frozen=True)
class _Stretch:
    start: float
    end: float
    opens_turn: bool


class WordsSaid:
    """Every word the caller said on the current call, placed in wall-clock time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._words: list[_Word] = []
        self._speech: list[_Stretch] = []  # in order
        self._lock = threading.Lock()  # the caller's thread adds, the server's reads

    def now(self) -> float:
        return self._clock()

    def new_call(self) -> None:
        with self._lock:
            self._words, self._speech = [], []

    def turn_started(self, said: Sequence[Said], *, after_s: float = FRAME_S) -> None:
        """A caller turn whose first sample reaches the line `after_s` from now."""
        start = self._clock() + after_s
        words: list[_Word] = []
        speech: list[_Stretch] = []
        for index, stretch in enumerate(said):
            texts = stretch.text.split()
            span = (stretch.end_ms - stretch.start_ms) / 1000
            at = start + stretch.start_ms / 1000
            speech.append(_Stretch(at, at + span, opens_turn=index == 0))
            for n, text in enumerate(texts):
                first = at + span * n / len(texts)
                words.append(_Word(first, first + span / len(texts), text))
        with self._lock:
            self._words += words
            self._speech = sorted(self._speech + speech, key=lambda x: x.start)

    def heard(self, audio_s: float, *, at: float | None = None) -> str:
        """The words said inside audio of `audio_s` seconds the bot's STT sent at `at`
        (now, by default)."""
        now = self._clock() if at is None else at
        with self._lock:
            words = list(self._words)
            start, end = self._placed(now, audio_s)
        return " ".join(w.text for w in words if start <= w.middle <= end)

    def _placed(self, now: float, audio_s: float) -> tuple[float, float]:
        """Where on the call audio of `audio_s` s sent at `now` began and ended."""
        kept = LONG_PAUSE_KEPT_MS / 1000
        said = [s for s in self._speech if s.start < now]
        if not said or now - said[-1].end > STALE_S:
            return now - audio_s, now
        end = min(said[-1].end, now)  # the caller's last stop, or now if still talking
        left, at = audio_s, end
        for stretch in reversed(said):
            left -= min(max(at - min(stretch.end, end), 0.0), kept)  # a pause, as cut
            length = min(stretch.end, end) - stretch.start
            if left <= length:
                return min(stretch.end, end) - left, end
            left -= length
            at = stretch.start
            if stretch.opens_turn:
                return at - min(left, PREROLL_S), end
        return at - left, end


def _wav_seconds(data: bytes) -> float:
    with wave.open(io.BytesIO(data), "rb") as wav:
        return wav.getnframes() / wav.getframerate()


def said_stt_app(words: WordsSaid) -> Starlette:
    """POST /audio/transcriptions, answered from `words` in OpenAI's verbose JSON."""

    async def transcriptions(request: Request) -> JSONResponse:
        sent = words.now()  # before the upload is read: when the bot sent it
        async with request.form() as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                return JSONResponse({"error": {"message": "file is required"}}, status_code=400)
            try:
                seconds = _wav_seconds(await upload.read())
            except (wave.Error, EOFError) as exc:
                return JSONResponse({"error": {"message": f"not a WAV: {exc}"}}, status_code=400)
        text = words.heard(seconds, at=sent)
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
