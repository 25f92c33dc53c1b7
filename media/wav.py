"""WAV files in (any common kind) and PCM16 out, for recordings, fixtures and tools.

`read_wav` parses the RIFF chunks itself: the stdlib `wave` reads only integer PCM, and
refuses with a bare `wave.Error: unknown format: 65534` the WAVE_FORMAT_EXTENSIBLE files
that sox writes by default for 24- and 32-bit audio. Read: PCM 8/16/24/32-bit, IEEE float
32/64-bit, each plain or extensible, any rate and channel count. Anything else is a
`WavError` whose message is one line naming the file and what is wrong with it.
"""

from __future__ import annotations

import struct
import wave
from pathlib import Path

import numpy as np

from media.codec import float_to_pcm16

__all__ = ["WavError", "read_wav", "write_wav"]

_PCM = 0x0001
_FLOAT = 0x0003
_EXTENSIBLE = 0xFFFE
_MAX_BYTES = 1 << 30  # a phone line's WAV is megabytes; a gigabyte is not audio we want


class WavError(ValueError):
    """A file that is not a WAV we can read; the message says which and why."""


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(float32 mono samples in [-1, 1], sample rate). Multichannel files are averaged."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise WavError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    if len(data) > _MAX_BYTES:
        raise WavError(f"{path}: over {_MAX_BYTES >> 20} MB, too long for a phone call")
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise WavError(f"{path}: not a WAV file (no RIFF/WAVE header)")
    fmt: bytes | None = None
    audio: bytes | None = None
    offset = 12
    while offset + 8 <= len(data):
        chunk_id, size = struct.unpack_from("<4sI", data, offset)
        body = data[offset + 8 : offset + 8 + size]
        if chunk_id == b"fmt ":
            fmt = body
        elif chunk_id == b"data":
            audio = body  # a cut file: what is there
            break
        offset += 8 + size + (size & 1)  # chunks are padded to even sizes
    if fmt is None or len(fmt) < 16:
        raise WavError(f"{path}: no format chunk; not a WAV file we can read")
    if audio is None:
        raise WavError(f"{path}: no audio (data chunk) in the file")
    tag, channels, rate, _, block, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _EXTENSIBLE:
        if len(fmt) < 40:
            raise WavError(f"{path}: an extensible WAV with a short format chunk")
        tag = struct.unpack_from("<H", fmt, 24)[0]  # the sub-format GUID's first field
    if channels < 1 or rate < 1 or block < 1 or block % channels:
        raise WavError(
            f"{path}: {channels} channels at {rate} Hz in {block}-byte frames is no audio"
        )
    samples = _decode(path, audio[: len(audio) - len(audio) % block], tag, bits, block, channels)
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return np.ascontiguousarray(samples, dtype=np.float32), rate


def _decode(
    path: str | Path, raw: bytes, tag: int, bits: int, block: int, channels: int
) -> np.ndarray:
    width = block // channels
    if tag == _PCM and bits <= 8 * width and width in (1, 2, 3, 4):
        if width == 1:  # 8-bit WAV is unsigned
            return (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
        if width == 3:
            bytes3 = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3)
            wide = np.zeros((bytes3.shape[0], 4), dtype=np.uint8)
            wide[:, 1:] = bytes3  # into the top three bytes of a little-endian int32
            return wide.view("<i4").reshape(-1).astype(np.float32) / 2.0**31
        ints = np.frombuffer(raw, dtype=f"<i{width}")
        return ints.astype(np.float32) / float(2 ** (8 * width - 1))
    if tag == _FLOAT and width in (4, 8):
        floats = np.frombuffer(raw, dtype=f"<f{width}").astype(np.float32)
        return np.clip(np.nan_to_num(floats), -1.0, 1.0)
    kind = {_PCM: "PCM", _FLOAT: "float"}.get(tag, f"format tag 0x{tag:04x}")
    raise WavError(
        f"{path}: {bits}-bit {kind} audio is not supported "
        "(PCM 8/16/24/32-bit or float 32/64-bit are)"
    )


def write_wav(path: str | Path, samples: np.ndarray, rate: int, channels: int = 1) -> None:
    """Write int16 or float samples as PCM16; stereo takes shape (n, 2)."""
    arr = np.asarray(samples)
    if channels == 1 and arr.ndim != 1:
        raise ValueError(f"mono audio must be 1-D, got shape {arr.shape}")
    if channels > 1 and (arr.ndim != 2 or arr.shape[1] != channels):
        raise ValueError(f"expected shape (n, {channels}), got {arr.shape}")
    pcm = arr if arr.dtype == np.int16 else float_to_pcm16(arr)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(np.ascontiguousarray(pcm, dtype="<i2").tobytes())
