"""Who gets a call slot: webhook reservations, one stream per CallSid, pre-start sockets.

Twilio's signature carries no timestamp, so a captured webhook replays as valid forever.
What a replay can do is bounded here:
- a CallSid is reserved at most once: a repeat of its webhook while the reservation
  waits keeps that one reservation (never renewed); once it has streamed, or its
  reservation lapsed, the CallSid is not reserved again;
- a CallSid starts one stream for as long as that call lives, and is remembered for
  `remember_s` after (longer than Twilio would ever retry a webhook);
- a reservation holds a slot only `hold_s` (Twilio opens the stream within a second or
  two), and reservations are capped apart from live calls: stale ones from replays never
  keep a genuine caller out.
Every table is bounded and every entry expires.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

REMEMBER_S = 6 * 3600.0
MAX_REMEMBERED = 100_000  # CallSids; ~15 MB at most, reached only by real calls
HOLD_S = 6.0  # the stream is due within START_TIMEOUT_S (5 s) of its socket, opened at once


class Reservation(Enum):
    GRANTED = "granted"
    BUSY = "busy"  # no slot free
    REPEATED = "repeated"  # this CallSid was reserved or streamed before: a replay


@dataclass
class Admission:
    max_calls: int
    # How long a webhook's reservation stays valid for its stream; a caller who hung up
    # before the stream frees it after this.
    reserve_s: float
    # Sockets between accept and `start`; each lives at most START_TIMEOUT_S.
    max_pending: int
    on_change: Callable[[int], None] = lambda active: None
    clock: Callable[[], float] = time.monotonic
    # How long a CallSid is remembered after its reservation or its call's end.
    remember_s: float = REMEMBER_S
    # How long a reservation keeps its slot from other callers.
    hold_s: float = HOLD_S
    max_remembered: int = MAX_REMEMBERED
    active: int = 0
    pending: int = 0
    _reserved: dict[str, float] = field(default_factory=dict)  # CallSid -> reserved at
    _live: set[str] = field(default_factory=set)  # CallSids of admitted calls
    # CallSid -> (forget at, has streamed); oldest first.
    _seen: OrderedDict[str, tuple[float, bool]] = field(default_factory=OrderedDict)

    def _prune(self) -> float:
        now = self.clock()
        for sid in [sid for sid, at in self._reserved.items() if at + self.reserve_s <= now]:
            del self._reserved[sid]  # lapsed; still in _seen: never reserved again
        while self._seen:
            sid, (forget_at, _) = next(iter(self._seen.items()))
            if forget_at > now and len(self._seen) <= self.max_remembered:
                break
            del self._seen[sid]
        return now

    def _remember(self, call_sid: str, now: float, *, streamed: bool) -> None:
        was = self._seen.pop(call_sid, None)
        self._seen[call_sid] = (now + self.remember_s, streamed or (was is not None and was[1]))

    def _holding(self, now: float) -> int:
        """Reservations still keeping their slot."""
        return sum(1 for at in self._reserved.values() if now - at < self.hold_s)

    @property
    def reserved(self) -> int:
        self._prune()
        return len(self._reserved)

    def reserve(self, call_sid: str) -> Reservation:
        """At the webhook: hold a slot for this call's stream."""
        now = self._prune()
        if call_sid in self._reserved:
            return Reservation.GRANTED  # a duplicate delivery: the same reservation
        if call_sid in self._live or call_sid in self._seen:
            return Reservation.REPEATED
        if self.active + self._holding(now) >= self.max_calls:
            return Reservation.BUSY
        if len(self._reserved) >= self.max_calls:
            # Capped apart from live calls: the oldest reservation, past its hold (one
            # is: fewer than max_calls hold), gives way. Its stream, should it still
            # come, is admitted like any other while a slot is free.
            del self._reserved[min(self._reserved, key=self._reserved.__getitem__)]
        self._reserved[call_sid] = now
        self._remember(call_sid, now, streamed=False)
        return Reservation.GRANTED

    def may_stream(self, call_sid: str) -> bool:
        """This CallSid has not started a stream (nor is one live)."""
        self._prune()
        seen = self._seen.get(call_sid)
        return call_sid not in self._live and not (seen is not None and seen[1])

    def claim_stream(self, call_sid: str) -> bool:
        """At `start`: False if this CallSid already started a stream (a replay)."""
        now = self._prune()
        if not self.may_stream(call_sid):
            return False
        self._remember(call_sid, now, streamed=True)
        return True

    def admit(self, call_sid: str) -> bool:
        """Take the call's reserved slot, or a free one; give it back with `release`."""
        now = self._prune()
        reserved_at = self._reserved.pop(call_sid, None)
        held = reserved_at is not None and now - reserved_at < self.hold_s
        if not held and self.active + self._holding(now) >= self.max_calls:
            return False
        self.active += 1
        self._live.add(call_sid)
        self.on_change(self.active)
        return True

    def release(self, call_sid: str) -> None:
        now = self._prune()
        self.active -= 1
        self._live.discard(call_sid)
        self._remember(call_sid, now, streamed=True)
        self.on_change(self.active)

    def open_pending(self) -> bool:
        if self.pending >= self.max_pending:
            return False
        self.pending += 1
        return True

    def close_pending(self) -> None:
        self.pending -= 1
