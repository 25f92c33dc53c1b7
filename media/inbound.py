"""Caller-audio clock driven by Twilio's media timestamps, not by arrival time.

Twilio may skip chunks (reportedly silent ones) and the network may duplicate or
reorder them; the timestamp (ms since stream start) says where each chunk belongs.
Missing time is filled with mu-law silence so that byte count == elapsed samples.
"""

from __future__ import annotations

from media.codec import MULAW_SILENCE

__all__ = ["InboundAudioClock"]

_JITTER_MS = 10  # timestamps wobble by a few ms; smaller mismatches are not gaps
_MAX_LINE_LEAD_S = 1.0


class InboundAudioClock:
    """Turns (timestamp, payload) chunks into a gap-free mu-law stream.

    `position` is the number of samples emitted so far: the call's inbound clock.
    """

    def __init__(self, sample_rate: int = 8000, max_gap_ms: int = 2000) -> None:
        self.sample_rate = sample_rate
        self.max_gap_samples = max_gap_ms * sample_rate // 1000
        self._jitter_samples = _JITTER_MS * sample_rate // 1000
        self._offset = 0  # position - timestamp in samples, changed only by a resync
        self.position = 0
        self.gaps_filled_samples = 0
        self.dropped_samples = 0
        self.resyncs = 0
        # position - arrival time x rate, at its largest over the frames so far: the
        # frame that came least delayed says where the caller's side of the line is.
        self._line_offset: float | None = None

    def started(self, wall_s: float) -> None:
        """The stream started at `wall_s` (monotonic seconds): the line is at sample 0."""
        self._note_arrival(wall_s)

    def line_position(self, wall_s: float) -> int:
        """Where the caller's side of the line is at `wall_s`, estimated.

        `position` says how much of the stream we have read, which lags the line while
        our loop is busy (at a call's start it read ~200 ms of frames late). Audio sent
        now starts playing at the line's position, not ours: scheduled from ours, a
        reply's echo reference ran 70-220 ms behind its echo. Never behind `position`,
        and never more than `_MAX_LINE_LEAD_S` ahead of it (a sender that stops).
        """
        if self._line_offset is None:
            return self.position
        estimate = round(self._line_offset + wall_s * self.sample_rate)
        lead = round(_MAX_LINE_LEAD_S * self.sample_rate)
        return min(max(self.position, estimate), self.position + lead)

    def _note_arrival(self, wall_s: float) -> None:
        offset = self.position - wall_s * self.sample_rate
        if self._line_offset is None or offset > self._line_offset:
            self._line_offset = offset

    def push(self, timestamp_ms: int, payload: bytes, arrived_s: float | None = None) -> bytes:
        """Bytes to feed downstream for this chunk: gap silence, then new audio.

        `arrived_s`: when the chunk was read (monotonic seconds), for `line_position`.
        """
        target = timestamp_ms * self.sample_rate // 1000 + self._offset
        gap = target - self.position
        out = b""
        if gap > self.max_gap_samples or gap < -self.max_gap_samples:
            # A jump this large is an outage or a restarted stream: fill at most
            # max_gap of silence and re-anchor the timestamp mapping on this chunk.
            fill = self.max_gap_samples if gap > 0 else 0
            out = bytes([MULAW_SILENCE]) * fill
            self.gaps_filled_samples += fill
            self.resyncs += 1
            self._offset += self.position + fill - target
        elif gap >= self._jitter_samples:
            # Whole chunks went missing: fill whole chunks, whatever the timestamps'
            # wobble, so the stream stays on Twilio's frame grid (the bot's audio starts
            # on it, and the echo canceller's reference is placed by it).
            fill = round(gap / len(payload)) * len(payload) if payload else gap
            out = bytes([MULAW_SILENCE]) * fill
            self.gaps_filled_samples += fill
        elif gap <= -self._jitter_samples:
            # Duplicate or late chunk: its first -gap samples were already emitted.
            overlap = min(-gap, len(payload))
            self.dropped_samples += overlap
            payload = payload[overlap:]
        out += payload
        self.position += len(out)
        if arrived_s is not None:
            self._note_arrival(arrived_s)
        return out
