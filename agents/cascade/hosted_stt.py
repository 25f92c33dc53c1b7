"""Speech to text on a hosted Whisper (STT_URL): an OpenAI-compatible transcription server.

The embedded Whisper (tiny.en or base, on the box's own cores) mishears synthetic and
phone voices often enough to limit turn taking: on `python -m benchmarks judge`'s
material, the words judge cuts off about a fifth of callers' pauses on Whisper's words
and about one in thirty on the words said, at the same waits (docs/benchmarks.md). A
larger Whisper on a GPU box, or a hosted one, hears better; this puts any server that
speaks OpenAI's audio API in the embedded one's place.

The request is OpenAI's `POST {STT_URL}/audio/transcriptions` (API reference, "Audio:
Create transcription"): multipart form data with the turn's audio as a 16 kHz mono
16-bit WAV `file`, `model`, `language`, `temperature` 0 and `response_format`
`verbose_json`, whose `segments` carry each segment's `avg_logprob` and `no_speech_prob`
(the reference's verbose transcription object). Whisper servers answer in that shape:
OpenAI's whisper-1, faster-whisper servers (speaches), vLLM. That evidence is what
`stt.assess` weighs, as it weighs the embedded Whisper's; a server that sends no
segments gives none, and its words are taken as heard.

What the embedded Whisper does beyond decoding is not done here: a last word with no
audio under it is dropped only by the embedded one (it needs Whisper's alignment).
"""

from __future__ import annotations

import io
import wave
from typing import Any

import httpx
import numpy as np

from agents.cascade.hosted_answers import posted_json
from agents.cascade.stt import MAX_WINDOW_S, Transcript, collapse_loop
from agents.config import shown_url
from agents.errors import SpeechToTextError

__all__ = ["HostedTranscriber", "wav_bytes"]

RATE = 16000


def wav_bytes(audio_16k: np.ndarray) -> bytes:
    """`audio_16k` (float, -1..1) as a 16-bit mono WAV file."""
    pcm = np.clip(np.asarray(audio_16k, dtype=np.float32), -1.0, 1.0)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes((pcm * 32767.0).astype("<i2").tobytes())
    return buffer.getvalue()


class HostedTranscriber:
    """`SpeechToText` on an OpenAI-compatible transcription server."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "whisper-1",
        api_key: str = "",
        language: str = "en",
        prompt: str = "",
        timeout_s: float = 3.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """`prompt`: text the model reads before the audio (the API's `prompt`: names
        and words callers are likely to say), none when empty."""
        self._url = base_url.rstrip("/") + "/audio/transcriptions"
        self._model = model
        self._language = language
        self._prompt = prompt.strip()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # A turn waits for its words: a server slower than this is a failed hearing
        # (the caller is asked again), not a call that hangs.
        self._client = httpx.Client(headers=headers, timeout=timeout_s, transport=transport)

    @property
    def where(self) -> str:
        return shown_url(self._url)

    def close(self) -> None:
        self._client.close()

    def transcribe(self, audio_16k: np.ndarray, *, timeout_s: float | None = None) -> Transcript:
        """Blocking: call it from a worker thread. `timeout_s` for a request that may take
        longer than one in a call (the first, at start)."""
        # The last 30 s at most, as the embedded Whisper hears them.
        audio = np.asarray(audio_16k, dtype=np.float32)[-MAX_WINDOW_S * RATE :]
        form = {
            "model": self._model,
            "language": self._language,
            "temperature": "0",
            "response_format": "verbose_json",
        }
        if self._prompt:
            form["prompt"] = self._prompt
        files = {"file": ("turn.wav", wav_bytes(audio), "audio/wav")}
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s
        payload = posted_json(
            self._client,
            self._url,
            error=SpeechToTextError,
            where=self.where,
            data=form,
            files=files,
            timeout=timeout,
        )
        return transcript_of(payload, audio_s=audio.size / RATE, where=self.where)


def transcript_of(payload: Any, *, audio_s: float, where: str = "") -> Transcript:
    """A verbose (or plain) JSON transcription as the embedded Whisper's `Transcript`.

    Whisper's no-speech probability is the first segment's (the embedded one reads it at
    the first decoding step, which opens the first segment); its mean log-probability is
    the segments' own, weighted by their tokens where they list them.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
        raise SpeechToTextError(f"{where}: the answer has no transcription text")
    segments = [s for s in payload.get("segments") or [] if isinstance(s, dict)]
    no_speech, logprob = 0.0, 0.0  # no evidence: the words stand as heard
    if segments:
        no_speech = _number(segments[0].get("no_speech_prob"), where)
        weights = [max(len(s.get("tokens") or []), 1) for s in segments]
        logprobs = [_number(s.get("avg_logprob"), where) for s in segments]
        logprob = float(np.average(logprobs, weights=weights))
    return Transcript(
        text=collapse_loop(payload["text"].strip()),
        no_speech_prob=no_speech,
        avg_logprob=logprob,
        audio_s=audio_s,
    )


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpeechToTextError(f"{where}: a segment lacks avg_logprob or no_speech_prob")
    return float(value)
