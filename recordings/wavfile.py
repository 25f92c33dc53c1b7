"""PCM16 mono WAV files written while a call runs, and read back after a crash.

A StreamingWav starts with a standard 44-byte header whose two size fields hold the
placeholder 0xFFFFFFFF ("until the end of the file", which most players honour), appends
samples as they come, hands them to the OS at least every `flush_every` samples and
patches the sizes on close. A process that dies before close leaves a file whose sizes
are placeholders: `repair_wav` recomputes them from the file length and `read_pcm16`
reads such a file as it is.

The data is flushed to the OS, not fsynced, while the call runs: that survives the
process dying, not the machine losing power. close() fsyncs.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from recordings.errors import CorruptRecord
from recordings.layout import private_opener

__all__ = ["StreamingWav", "check_pcm16", "count_samples", "read_pcm16", "repair_wav"]

PLACEHOLDER = 0xFFFFFFFF
_HEADER_BYTES = 44
_ZERO_BLOCK = 8000  # samples of silence written per write() when padding


def _header(sample_rate: int, data_bytes: int) -> bytes:
    riff = PLACEHOLDER if data_bytes == PLACEHOLDER else 36 + data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        riff,
        b"WAVE",
        b"fmt ",
        16,  # fmt chunk size for plain PCM
        1,  # PCM
        1,  # mono
        sample_rate,
        sample_rate * 2,  # byte rate
        2,  # block align
        16,  # bits per sample
        b"data",
        data_bytes,
    )


def check_pcm16(pcm16: np.ndarray) -> np.ndarray:
    """Return `pcm16` if it is a 1-D int16 array, else raise TypeError."""
    if not isinstance(pcm16, np.ndarray) or pcm16.dtype != np.int16 or pcm16.ndim != 1:
        shape = getattr(pcm16, "shape", None)
        dtype = getattr(pcm16, "dtype", type(pcm16).__name__)
        raise TypeError(f"expected a 1-D int16 array, got {dtype} with shape {shape}")
    return pcm16


class StreamingWav:
    """A PCM16 mono WAV file being appended to. Not thread-safe: one owner writes it."""

    def __init__(self, path: Path, sample_rate: int = 8000, *, flush_every: int = 8000) -> None:
        """Create `path` (never overwrite one) and write the placeholder header at once,
        so a crash right after leaves a valid, empty WAV rather than a headerless file."""
        self.path = Path(path)
        self.sample_rate = sample_rate
        self._flush_every = flush_every
        self._file: BinaryIO = open(  # owned until close()
            self.path, "xb", opener=private_opener
        )
        self._samples = 0
        self._unflushed = 0
        try:
            self._file.write(_header(sample_rate, PLACEHOLDER))
            self._file.flush()
        except BaseException:
            self._file.close()
            raise

    @property
    def samples(self) -> int:
        """Samples appended so far (including padding)."""
        return self._samples

    @property
    def closed(self) -> bool:
        return self._file.closed

    def append(self, pcm16: np.ndarray) -> None:
        """Append int16 samples; flushed to the OS once `flush_every` have accumulated."""
        self._require_open()
        data = np.ascontiguousarray(check_pcm16(pcm16), dtype="<i2").tobytes()
        self._file.write(data)
        self._samples += pcm16.size
        self._unflushed += pcm16.size
        if self._unflushed >= self._flush_every:
            self.flush()

    def pad_to(self, samples: int) -> None:
        """Append silence until the file holds `samples` samples; never shortens it."""
        self._require_open()
        while self._samples < samples:
            block = min(samples - self._samples, _ZERO_BLOCK)
            self.append(np.zeros(block, dtype=np.int16))

    def flush(self) -> None:
        """Hand buffered samples to the OS, where they survive this process dying."""
        self._require_open()
        self._file.flush()
        self._unflushed = 0

    def close(self) -> None:
        """Patch the header sizes, fsync and close. Safe to call twice."""
        if self._file.closed:
            return
        try:
            self._file.flush()
            self._file.seek(0)
            self._file.write(_header(self.sample_rate, self._samples * 2))
            self._file.flush()
            os.fsync(self._file.fileno())
        finally:
            self._file.close()

    def _require_open(self) -> None:
        if self._file.closed:
            raise ValueError(f"{self.path}: the WAV file is already closed")


@dataclass(frozen=True)
class _Layout:
    """What the header of a PCM WAV file says, next to what the file holds."""

    sample_rate: int
    channels: int
    bits: int
    riff_size: int
    data_offset: int  # byte where the samples start
    data_size: int  # as the header says
    file_size: int

    @property
    def actual_data_size(self) -> int:
        """The data size the file supports: the header's unless it is a placeholder or
        runs past the end of the file, else everything after the header (whole samples)."""
        available = self.file_size - self.data_offset
        if self.data_size in (0, PLACEHOLDER) or self.data_size > available:
            return available - available % (self.bits // 8 * self.channels or 2)
        return self.data_size


def _read_layout(f: BinaryIO, path: Path) -> _Layout:
    file_size = os.fstat(f.fileno()).st_size
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise CorruptRecord(path, "not a RIFF/WAVE file")
    riff_size = struct.unpack("<I", head[4:8])[0]
    fmt: tuple[int, int, int, int] | None = None
    position = 12
    while position + 8 <= file_size:
        f.seek(position)
        chunk_id, size = struct.unpack("<4sI", f.read(8))
        if chunk_id == b"fmt ":
            if size < 16:
                raise CorruptRecord(path, f"fmt chunk of {size} bytes is too short")
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", f.read(16))
            fmt = (tag, channels, rate, bits)
        elif chunk_id == b"data":
            if fmt is None:
                raise CorruptRecord(path, "data chunk before any fmt chunk")
            tag, channels, rate, bits = fmt
            if tag != 1 or bits != 16:
                raise CorruptRecord(path, f"not 16-bit PCM (format {tag}, {bits} bits)")
            return _Layout(rate, channels, bits, riff_size, position + 8, size, file_size)
        # Chunks are padded to an even length.
        position += 8 + size + (size & 1)
    raise CorruptRecord(path, "no data chunk")


def repair_wav(path: Path) -> bool:
    """Make the header sizes of a WAV file left by a crash match its length.

    Returns True when the file changed. A trailing odd byte (half a sample) is cut off.
    A file whose sizes are already right is left alone, byte for byte.
    """
    path = Path(path)
    with open(path, "r+b") as f:
        layout = _read_layout(f, path)
        data_size = layout.actual_data_size
        end = layout.data_offset + data_size
        changed = data_size != layout.data_size
        if changed:
            # The header's size was unusable, so the data runs to the end of the file:
            # `end` falls short of it by at most the odd byte, which goes.
            f.seek(layout.data_offset - 4)
            f.write(struct.pack("<I", data_size))
            f.truncate(end)
        riff_size = (end if changed else layout.file_size) - 8
        # An unchanged file keeps a RIFF size smaller than itself (trailing bytes outside
        # the RIFF are not ours to judge); one claiming more than the file holds is fixed.
        if layout.riff_size != riff_size and (changed or layout.riff_size > riff_size):
            f.seek(4)
            f.write(struct.pack("<I", riff_size))
            changed = True
        if changed:
            f.flush()
            os.fsync(f.fileno())
    return changed


def read_pcm16(path: Path) -> tuple[np.ndarray, int]:
    """(int16 mono samples, sample rate) of a PCM16 WAV, even one whose header a crash
    left with placeholder or too-large sizes. Multichannel files are refused."""
    path = Path(path)
    with open(path, "rb") as f:
        layout = _read_layout(f, path)
        if layout.channels != 1:
            raise CorruptRecord(path, f"expected mono, got {layout.channels} channels")
        f.seek(layout.data_offset)
        raw = f.read(layout.actual_data_size)
    return np.frombuffer(raw, dtype="<i2").astype(np.int16), layout.sample_rate


def count_samples(path: Path) -> int:
    """How many samples read_pcm16 would return, without reading them."""
    path = Path(path)
    with open(path, "rb") as f:
        layout = _read_layout(f, path)
    return layout.actual_data_size // (2 * layout.channels)
