"""The voice an omni duplex model speaks with: a short WAV of the voice to clone.

MiniCPM-o produces no audio without one (`prepare(prompt_wav_path=...)`). `OMNI_VOICE_WAV`
names a file; left empty, the worker speaks with the cascade's own bundled Piper voice,
rendered once into the model cache. Same voice on both paths: a caller whose call falls
back from the worker to the cascade mid-call hears no change of speaker.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from agents.errors import BackendUnavailable
from media.resample import resample
from media.wav import WavError, read_wav, write_wav

VOICE_RATE = 16000  # what the model takes for its reference audio
# About eight seconds of plain, even speech: enough for a voice prompt, short enough
# that its audio embedding costs little of the context.
_SAMPLE_TEXT = (
    "Hello, and thanks for calling. I'm happy to help you today. "
    "Tell me what you need, and I'll do my best to sort it out quickly."
)
_PIPER_ASSET = "piper-joe-medium"


def default_voice_wav(cache_dir: str | Path, *, threads: int = 2) -> Path:
    """The bundled Piper voice saying a few sentences, as a 16 kHz WAV; made once."""
    target = Path(cache_dir).expanduser() / "omni" / "voice-piper-joe-16k.wav"
    if target.exists():
        return target
    from agents.assets import ModelCache
    from agents.cascade.tts import PiperSpeaker

    speaker = PiperSpeaker(ModelCache(cache_dir).path(_PIPER_ASSET), threads=threads)
    audio = resample(speaker.synthesize(_SAMPLE_TEXT), speaker.sample_rate, VOICE_RATE)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    write_wav(partial, audio, VOICE_RATE)
    partial.replace(target)  # atomic: two workers starting together both see a whole file
    return target


def load_voice(path: str | Path) -> np.ndarray:
    """The voice WAV as 16 kHz float32 mono; BackendUnavailable when it is not usable."""
    try:
        audio, rate = read_wav(path)
    except WavError as exc:
        raise BackendUnavailable(
            f"the omni voice WAV cannot be read ({exc}); set OMNI_VOICE_WAV to a WAV of "
            "5-15 s of clear speech, or leave it empty for the bundled voice"
        ) from exc
    if audio.size < rate:
        raise BackendUnavailable(f"the omni voice WAV {path} is under a second long")
    out = audio if rate == VOICE_RATE else resample(audio, rate, VOICE_RATE)
    return np.ascontiguousarray(out, dtype=np.float32)
