"""Record one call without ever making it wait for the disk.

The call's event loop hands events and audio to `CallRecorder`, which puts them on a
bounded queue without blocking; one daemon thread takes them off and owns every file
(RecordWriter). When the disk cannot keep up the queue fills and new items are dropped
and counted, because a phone call that stalls on a slow disk is worse than a record with
a gap. Failures in the writer thread (a full disk) are logged and counted, never raised
into the call. `close()` is the one blocking method: it waits for the writer to finish
the record, so call it through `asyncio.to_thread`.
"""

from __future__ import annotations

import logging
import operator
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from recordings.jsonio import dumps_line, to_jsonable
from recordings.layout import (
    FOLDER_MODE,
    FORMAT_VERSION,
    SAMPLE_RATE,
    EndedWith,
    check_call_id,
    format_time,
    record_dir,
)
from recordings.wavfile import check_pcm16
from recordings.writer import RecordWriter

__all__ = ["CallRecorder"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Line:
    text: str


@dataclass(frozen=True, slots=True)
class _CallerAudio:
    pcm16: np.ndarray


@dataclass(frozen=True, slots=True)
class _BotAudio:
    start_sample: int
    pcm16: np.ndarray


@dataclass(frozen=True, slots=True)
class _Flush:
    done: threading.Event


@dataclass(frozen=True, slots=True)
class _Close:
    ended_with: EndedWith
    ended_at: datetime
    duration_s: float
    transcript: dict[str, Any]
    meta_updates: dict[str, Any]


_Item = _Line | _CallerAudio | _BotAudio | _Flush | _Close


class CallRecorder:
    """The record of one call, written in the background.

    Construction is synchronous (a folder, meta.json and three empty files: a few
    milliseconds) so that a record that cannot be started fails here, with RecordExists,
    InvalidCallId or an OSError, before the call relies on it.

    Audio arrays are copied when handed over (a microsecond per 20 ms frame), so the
    caller may reuse its buffers. After `close()` every method is a no-op.
    """

    def __init__(
        self,
        root: Path,
        call_sid: str,
        *,
        meta: Mapping[str, Any],
        queue_size: int = 8192,
        flush_interval_s: float = 1.0,
        max_bytes: int | None = None,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        self.call_sid = check_call_id(call_sid)
        self.path = record_dir(root, call_sid)
        self._started_at = datetime.now(UTC)
        self._started = time.monotonic()
        self._meta = _initial_meta(meta, call_sid, self._started_at)
        self._flush_interval_s = flush_interval_s
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()  # guards the counters and the closing flag
        self._dropped = 0
        self._errors = 0
        self._closing = False
        # What a record may grow to: past it, nothing more is written but its end,
        # and meta.json says `truncated`. Counted where items are handed over.
        self._max_bytes = max_bytes
        self._bytes = 0
        self._truncated = False
        Path(root).mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        self._writer = RecordWriter(self.path, self._meta)
        self._thread = threading.Thread(target=self._run, name=f"recorder-{call_sid}", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Items refused because the queue was full: the disk fell behind the call."""
        with self._lock:
            return self._dropped

    @property
    def errors(self) -> int:
        """Writes that failed in the writer thread (each logged, the first with a trace)."""
        with self._lock:
            return self._errors

    @property
    def accepting(self) -> bool:
        """Events are still taken (close() has not been called)."""
        return self._accepting()

    @property
    def closed(self) -> bool:
        """True once the record is finished and its files closed: nothing writes to it
        any more, so repair and cleanup may touch it. False while close() is still
        finishing it."""
        return not self._thread.is_alive()

    # --- non-blocking, for the call's event loop -------------------------------------

    def event(self, t_ms: float, name: str, /, **data: Any) -> None:
        """Append `{"t_ms", "event": name, **data}` to the timeline; never blocks.

        Values that are not JSON (numpy scalars, enums, paths...) are coerced; the line
        is serialised here, so later changes to `data` do not reach the record.
        """
        if "event" in data:
            raise ValueError("'event' is reserved for the event name")
        if not self._accepting():
            return
        line = dumps_line({"t_ms": round(float(t_ms), 3), "event": name, **data})
        if self._fits(len(line)):
            self._offer(_Line(line))

    def caller_audio(self, pcm16: np.ndarray) -> None:
        """Append caller audio: sample i of caller.wav is call-clock sample i."""
        pcm = check_pcm16(pcm16).copy()
        # Twice: bot.wav is padded to caller.wav's length at close.
        if self._accepting() and self._fits(2 * pcm.nbytes):
            self._offer(_CallerAudio(pcm))

    def bot_audio(self, start_sample: int, pcm16: np.ndarray) -> None:
        """Place audio the caller heard at `start_sample` on the call clock.

        Pieces come in non-decreasing start order; silence fills gaps and a piece that
        starts before the end of what is written loses its overlapping head.
        """
        start = operator.index(start_sample)
        if start < 0:
            raise ValueError(f"start_sample must be >= 0, got {start}")
        pcm = check_pcm16(pcm16).copy()
        if self._accepting() and self._fits(pcm.nbytes):
            self._offer(_BotAudio(start, pcm))

    # --- blocking, for threads and tests ----------------------------------------------

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything handed over so far is written and flushed to the OS.

        Returns False when that did not happen within `timeout_s` (or after close()).
        Blocking: for tests and tools, not for the call's event loop.
        """
        if not self._accepting():
            return False
        done = threading.Event()
        try:
            self._queue.put(_Flush(done), timeout=timeout_s)
        except queue.Full:
            return False
        return done.wait(timeout_s)

    def close(
        self,
        *,
        ended_with: EndedWith | str,
        transcript: Mapping[str, Any],
        meta_updates: Mapping[str, Any] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        """Finish the record and wait (up to `timeout_s`) for the writer to be done.

        The writer writes what is still queued, pads bot.wav to caller.wav's length,
        patches both WAV headers, writes transcript.json and rewrites meta.json with
        `meta_updates` merged in and the end of the call (ended_at, duration_s,
        ended_with, and `recorder`: {"dropped", "errors"}). Those recorder-owned keys win
        over `meta_updates`. meta.json is written last: its `ended_at` marks a complete
        record. A second call only waits for the first to finish.
        """
        ended = EndedWith(ended_with)
        if ended is EndedWith.CRASHED:
            raise ValueError("ended_with='crashed' is reserved for RecordStore.repair")
        if not isinstance(transcript, Mapping):
            raise TypeError(f"transcript must be a mapping, got {type(transcript).__name__}")
        deadline = time.monotonic() + timeout_s
        with self._lock:
            already_closing, self._closing = self._closing, True
        if not already_closing:
            # The monotonic clock, not the wall clock, measures the call: NTP may step.
            elapsed = time.monotonic() - self._started
            item = _Close(
                ended_with=ended,
                ended_at=self._started_at + timedelta(seconds=elapsed),
                duration_s=round(elapsed, 3),
                transcript=to_jsonable(transcript),
                meta_updates=to_jsonable(meta_updates or {}),
            )
            try:
                # The one put that waits: the end of a record must not be dropped.
                self._queue.put(item, timeout=timeout_s)
            except queue.Full:
                log.error(
                    "recording of call %s: writer stuck for %.1f s, record left unfinished",
                    self.call_sid,
                    timeout_s,
                )
                return
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            log.warning(
                "recording of call %s: still finishing after %.1f s; left to the writer",
                self.call_sid,
                timeout_s,
            )

    # --- the writer thread --------------------------------------------------------------

    @property
    def truncated(self) -> bool:
        """True once the record reached `max_bytes` and stopped growing."""
        with self._lock:
            return self._truncated

    def _fits(self, size: int) -> bool:
        with self._lock:
            if self._truncated:
                return False
            if self._max_bytes is not None and self._bytes + size > self._max_bytes:
                if not self._truncated:
                    log.warning("recording of call %s: size cap reached", self.call_sid)
                self._truncated = True
                return False
            self._bytes += size
            return True

    def _accepting(self) -> bool:
        with self._lock:
            return not self._closing

    def _offer(self, item: _Item) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._lock:
                self._dropped += 1
                first = self._dropped == 1
            if first:
                log.warning(
                    "recording of call %s: disk behind, dropping record items", self.call_sid
                )

    def _run(self) -> None:
        last_flush = time.monotonic()
        while True:
            try:
                item: _Item | None = self._queue.get(timeout=self._flush_interval_s)
            except queue.Empty:
                item = None
            if isinstance(item, _Close):
                self._finish(item)
                return
            if item is not None:
                self._attempt(self._handle, item)
            # Audio that stops arriving (the bot falls silent) still reaches the OS.
            if isinstance(item, _Flush) or time.monotonic() - last_flush >= self._flush_interval_s:
                self._attempt(self._writer.flush)
                last_flush = time.monotonic()
            if isinstance(item, _Flush):
                item.done.set()

    def _handle(self, item: _Item) -> None:
        match item:
            case _Line(text):
                self._writer.write_line(text)
            case _CallerAudio(pcm16):
                self._writer.caller_audio(pcm16)
            case _BotAudio(start_sample, pcm16):
                self._writer.bot_audio(start_sample, pcm16)
            case _Flush() | _Close():
                pass

    def _finish(self, item: _Close) -> None:
        self._attempt(self._writer.close_files)
        self._attempt(self._writer.write_transcript, item.transcript)
        meta = {**self._meta, **item.meta_updates}
        meta.update(
            format=FORMAT_VERSION,
            call_sid=self.call_sid,
            started_at=self._meta["started_at"],
            ended_at=format_time(item.ended_at),
            duration_s=item.duration_s,
            ended_with=str(item.ended_with),
            sample_rate=SAMPLE_RATE,
            recorder={"dropped": self.dropped, "errors": self.errors},
            truncated=self.truncated,
        )
        self._attempt(self._writer.write_meta, meta)
        if self.dropped or self.errors:
            log.warning(
                "recording of call %s finished with %d dropped items and %d write errors",
                self.call_sid,
                self.dropped,
                self.errors,
            )

    def _attempt(self, step: Callable[..., None], *args: Any) -> bool:
        try:
            step(*args)
        except Exception:
            with self._lock:
                self._errors += 1
                first = self._errors == 1
            if first:
                log.exception("recording of call %s: write failed", self.call_sid)
            else:
                log.debug("recording of call %s: write failed", self.call_sid, exc_info=True)
            return False
        return True


def _initial_meta(meta: Mapping[str, Any], call_sid: str, started_at: datetime) -> dict[str, Any]:
    given = to_jsonable(meta)
    if not isinstance(given, dict):
        raise TypeError(f"meta must be a mapping, got {type(meta).__name__}")
    # The documented keys first, in the documented order; the caller's extra keys follow.
    merged: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "call_sid": call_sid,
        "stream_sid": None,
        "account_sid": None,
        "from": None,
        "to": None,
        "started_at": None,
        "ended_at": None,
        "duration_s": None,
        "ended_with": None,
        "agent": None,
        "fallbacks": [],
        "error": None,
        "versions": {},
        "sample_rate": SAMPLE_RATE,
        "summary": {},
    }
    merged.update(given)
    merged.update(
        format=FORMAT_VERSION,
        call_sid=call_sid,
        started_at=format_time(started_at),
        ended_at=None,
        duration_s=None,
        ended_with=None,
        sample_rate=SAMPLE_RATE,
    )
    return merged
