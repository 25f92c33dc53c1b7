"""Who gets a call slot: webhook reservations, one stream per CallSid, pre-start sockets.

Twilio's signature carries no timestamp, so a captured webhook replays as valid forever.
What a replay can do is bounded here, with the CallSid's history kept by a `CallLedger`
(this process's memory, or Redis shared by every gateway: app.call_ledger):
- a CallSid is reserved at most once: a repeat of its webhook while the reservation
  waits keeps that one reservation (never renewed); once it has streamed, or its
  reservation lapsed, the CallSid is not reserved again;
- a CallSid starts one stream for as long as that call lives, and is remembered for
  `remember_s` after (longer than Twilio would ever retry a webhook);
- a reservation holds a slot only `hold_s` (Twilio opens the stream within a second or
  two), and reservations are capped apart from live calls: stale ones from replays never
  keep a genuine caller out.
Slots are this gateway's own (MAX_CALLS each), never shared. Every table is bounded and
every entry expires.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from app.call_ledger import (
    MAX_REMEMBERED,
    REMEMBER_S,
    CallLedger,
    LocalCallLedger,
    Sighting,
)

__all__ = ["HOLD_S", "MAX_REMEMBERED", "REMEMBER_S", "Admission", "Reservation"]

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
    # Where CallSids are remembered; None: in this process (a LocalCallLedger).
    ledger: CallLedger | None = None
    active: int = 0
    pending: int = 0
    _reserved: dict[str, float] = field(default_factory=dict)  # CallSid -> reserved at

    def __post_init__(self) -> None:
        if self.ledger is None:
            self.ledger = LocalCallLedger(
                self.reserve_s,
                clock=self.clock,
                remember_s=self.remember_s,
                max_remembered=self.max_remembered,
            )

    @property
    def calls(self) -> CallLedger:
        assert self.ledger is not None  # set in __post_init__
        return self.ledger

    def _prune(self) -> float:
        now = self.clock()
        for sid in [sid for sid, at in self._reserved.items() if at + self.reserve_s <= now]:
            del self._reserved[sid]  # lapsed; the ledger never reserves it again
        return now

    def _holding(self, now: float) -> int:
        """Reservations still keeping their slot."""
        return sum(1 for at in self._reserved.values() if now - at < self.hold_s)

    def _full(self, now: float) -> bool:
        return self.active + self._holding(now) >= self.max_calls

    @property
    def reserved(self) -> int:
        self._prune()
        return len(self._reserved)

    async def reserve(self, call_sid: str) -> Reservation:
        """At the webhook: hold a slot for this call's stream."""
        now = self._prune()
        if call_sid in self._reserved:
            # A duplicate delivery keeps the same reservation, unless its stream started
            # meanwhile (with a shared ledger, perhaps on another gateway).
            if await self.calls.reserve(call_sid) is Sighting.REPEATED:
                self._reserved.pop(call_sid, None)
                return Reservation.REPEATED
            return Reservation.GRANTED
        if self._full(now):
            # A busy line reserves nothing, so a replay is still told apart from a caller.
            repeated = await self.calls.seen(call_sid)
            return Reservation.REPEATED if repeated else Reservation.BUSY
        sighting = await self.calls.reserve(call_sid)
        if sighting is Sighting.REPEATED:
            return Reservation.REPEATED
        if sighting is Sighting.PENDING:
            # Reserved by another gateway (Twilio's duplicate, delivered there first): the
            # same reservation, so its stream may come here, but it holds no slot here;
            # its window is the first delivery's, never renewed.
            return Reservation.GRANTED
        now = self._prune()  # the ledger was awaited: the slots may have changed
        if self._full(now):
            return Reservation.BUSY
        if len(self._reserved) >= self.max_calls:
            # Capped apart from live calls: the oldest reservation, past its hold (one
            # is: fewer than max_calls hold), gives way. Its stream, should it still
            # come, is admitted like any other while a slot is free.
            del self._reserved[min(self._reserved, key=self._reserved.__getitem__)]
        self._reserved[call_sid] = now
        return Reservation.GRANTED

    async def claim_stream(self, call_sid: str) -> bool:
        """At `start`: False if this CallSid already started a stream (a replay), here
        or, with a shared ledger, on any gateway."""
        return await self.calls.claim_stream(call_sid)

    def admit(self, call_sid: str) -> bool:
        """Take the call's reserved slot, or a free one; give it back with `release`."""
        now = self._prune()
        reserved_at = self._reserved.pop(call_sid, None)
        held = reserved_at is not None and now - reserved_at < self.hold_s
        if not held and self._full(now):
            return False
        self.active += 1
        self.calls.live(call_sid)
        self.on_change(self.active)
        return True

    def release(self, call_sid: str) -> None:
        self.active -= 1
        self.calls.ended(call_sid)
        self.on_change(self.active)

    def open_pending(self) -> bool:
        if self.pending >= self.max_pending:
            return False
        self.pending += 1
        return True

    def close_pending(self) -> None:
        self.pending -= 1

    async def start(self) -> None:
        await self.calls.start()

    async def aclose(self) -> None:
        await self.calls.aclose()
