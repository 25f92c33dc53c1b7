"""Caller-audio clock driven by Twilio's media timestamps, not by arrival time.

Twilio may skip chunks (reportedly silent ones) and the network may duplicate or
reorder them; the timestamp (ms since stream start) says where each chunk belongs.
Missing time is filled with mu-law silence so that byte count == elapsed samples.
"""

from __future__ import annotations

from media.codec import MULAW_SILENCE

__all__ = ["InboundAudioClock"]

_JITTER_MS = 10  # timestamps wobble by a few ms; smaller mismatches are not gaps


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

    def push(self, timestamp_ms: int, payload: bytes) -> bytes:
        """Bytes to feed downstream for this chunk: gap silence, then new audio."""
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
            out = bytes([MULAW_SILENCE]) * gap
            self.gaps_filled_samples += gap
        elif gap <= -self._jitter_samples:
            # Duplicate or late chunk: its first -gap samples were already emitted.
            overlap = min(-gap, len(payload))
            self.dropped_samples += overlap
            payload = payload[overlap:]
        out += payload
        self.position += len(out)
        return out
