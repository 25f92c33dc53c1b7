"""The files of one call's record, written synchronously by their single owner.

CallRecorder runs this in its writer thread; nothing here is thread-safe, and nothing
here should run on an event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from recordings.errors import RecordExists
from recordings.jsonio import write_json_atomic
from recordings.layout import (
    BOT_WAV,
    CALLER_WAV,
    FOLDER_MODE,
    META,
    SAMPLE_RATE,
    TIMELINE,
    TRANSCRIPT,
    private_opener,
)
from recordings.wavfile import StreamingWav

__all__ = ["RecordWriter"]


class RecordWriter:
    """Creates a record's folder and owns its open files until `close_files`."""

    def __init__(self, folder: Path, meta: Mapping[str, Any]) -> None:
        """Create `folder` (it must not exist: records are never overwritten), write
        meta.json and open the timeline and both WAV files."""
        self.folder = Path(folder)
        try:
            self.folder.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            raise RecordExists(f"a record already exists at {self.folder}") from None
        write_json_atomic(self.folder / META, meta)
        self._timeline: TextIO = open(  # owned until close_files()
            self.folder / TIMELINE, "x", encoding="utf-8", opener=private_opener
        )
        try:
            self._caller = StreamingWav(self.folder / CALLER_WAV, SAMPLE_RATE)
            try:
                self._bot = StreamingWav(self.folder / BOT_WAV, SAMPLE_RATE)
            except BaseException:
                self._caller.close()
                raise
        except BaseException:
            self._timeline.close()
            raise

    @property
    def caller_samples(self) -> int:
        return self._caller.samples

    @property
    def bot_samples(self) -> int:
        return self._bot.samples

    def write_line(self, line: str) -> None:
        """Append one timeline line (with its newline) and flush it to the OS."""
        self._timeline.write(line)
        self._timeline.flush()

    def caller_audio(self, pcm16: np.ndarray) -> None:
        self._caller.append(pcm16)

    def bot_audio(self, start_sample: int, pcm16: np.ndarray) -> None:
        """Place bot audio at `start_sample` on the call clock.

        Silence fills a gap before it; a piece starting before what is already written
        loses its overlapping head, because what was written has been heard.
        """
        overlap = self._bot.samples - start_sample
        if overlap > 0:
            pcm16 = pcm16[overlap:]
            if pcm16.size == 0:
                return
        else:
            self._bot.pad_to(start_sample)
        self._bot.append(pcm16)

    def flush(self) -> None:
        self._timeline.flush()
        self._caller.flush()
        self._bot.flush()

    def close_files(self) -> None:
        """Pad bot.wav to the caller's length, patch both WAV headers, close the timeline.

        Every file is closed even when an earlier step fails; the first error is raised.
        """
        try:
            self._bot.pad_to(self._caller.samples)
        finally:
            try:
                self._bot.close()
            finally:
                try:
                    self._caller.close()
                finally:
                    self._timeline.close()

    def write_transcript(self, transcript: Mapping[str, Any]) -> None:
        write_json_atomic(self.folder / TRANSCRIPT, transcript)

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        write_json_atomic(self.folder / META, meta)
