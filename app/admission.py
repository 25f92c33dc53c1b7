"""Who gets a call slot: webhook reservations, one stream per CallSid, pre-start sockets.

Every count here is bounded, and every entry expires: a stranger who replays a signed
webhook or a handshake header cannot pile up state or hold slots past the token window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Admission:
    max_calls: int
    # How long a stream's CallSid is remembered: the call token's validity, after which
    # its token cannot start a stream anyway.
    window_s: float
    # How long a webhook's slot waits for its stream (Twilio connects within a second
    # or two); a caller who hung up before the stream frees it after this.
    reserve_s: float
    # Sockets between accept and `start`; each lives at most START_TIMEOUT_S.
    max_pending: int
    on_change: Callable[[int], None] = lambda active: None
    clock: Callable[[], float] = time.monotonic
    active: int = 0
    pending: int = 0
    _reserved: dict[str, float] = field(default_factory=dict)  # CallSid -> expiry
    _streamed: dict[str, float] = field(default_factory=dict)  # CallSid -> expiry

    def _prune(self) -> None:
        now = self.clock()
        for table in (self._reserved, self._streamed):
            for sid in [sid for sid, expiry in table.items() if expiry <= now]:
                del table[sid]

    @property
    def reserved(self) -> int:
        self._prune()
        return len(self._reserved)

    def reserve(self, call_sid: str) -> bool:
        """At the webhook: hold a slot for this call's stream (a replay keeps its one)."""
        self._prune()
        if call_sid in self._reserved:
            return True
        if self.active + len(self._reserved) >= self.max_calls:
            return False
        self._reserved[call_sid] = self.clock() + self.reserve_s
        return True

    def claim_stream(self, call_sid: str) -> bool:
        """At `start`: False if this CallSid already started a stream (a replay)."""
        self._prune()
        if call_sid in self._streamed:
            return False
        self._streamed[call_sid] = self.clock() + self.window_s
        return True

    def admit(self, call_sid: str) -> bool:
        """Take the call's reserved slot, or a free one; give it back with `release`."""
        self._prune()
        if self._reserved.pop(call_sid, None) is None:
            if self.active + len(self._reserved) >= self.max_calls:
                return False
        self.active += 1
        self.on_change(self.active)
        return True

    def release(self) -> None:
        self.active -= 1
        self.on_change(self.active)

    def open_pending(self) -> bool:
        if self.pending >= self.max_pending:
            return False
        self.pending += 1
        return True

    def close_pending(self) -> None:
        self.pending -= 1
