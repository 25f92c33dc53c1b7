"""What every gateway must agree on about a CallSid, and this process's own memory of it.

A CallSid is reserved by its first webhook, starts one stream, is live while its call
runs, and is remembered for hours after. `CallLedger` is that agreement. Two
implementations keep it: `LocalCallLedger` here, in this process only (one gateway: the
embedded default), and `app.redis_ledger.RedisCallLedger`, shared by every gateway on one
Redis. The slot count is not in the ledger: each gateway counts its own (app.admission).

Only `reserve`, `seen` and `claim_stream` are awaited; `live` and `ended` never make a
call wait: a shared ledger writes them in the background.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

REMEMBER_S = 6 * 3600.0  # longer than Twilio would ever retry a webhook
MAX_REMEMBERED = 100_000  # CallSids; ~15 MB at most, reached only by real calls


class Sighting(Enum):
    """What a webhook's CallSid is to the ledger."""

    NEW = "new"  # never seen: reserved now
    PENDING = "pending"  # reserved moments ago and no stream yet: a duplicate delivery
    REPEATED = "repeated"  # it streamed, is live, or its reservation lapsed: a replay


class CallLedger(Protocol):
    async def reserve(self, call_sid: str) -> Sighting:
        """At the webhook: reserve this CallSid once (for `reserve_s`)."""
        ...

    async def seen(self, call_sid: str) -> bool:
        """Reserved, streamed or live, and not yet forgotten."""
        ...

    async def claim_stream(self, call_sid: str) -> bool:
        """At `start`: True once per CallSid; False if it started a stream before."""
        ...

    def live(self, call_sid: str) -> None:
        """Its call is in progress here: remembered for as long as it lasts."""
        ...

    def ended(self, call_sid: str) -> None:
        """Its call is over: remembered for `remember_s` more."""
        ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


@dataclass
class LocalCallLedger:
    """The ledger in this process's memory. Every table is bounded and every entry expires."""

    # How long a reservation waits for its stream; a repeat within it is a duplicate.
    reserve_s: float
    clock: Callable[[], float] = time.monotonic
    # How long a CallSid is remembered after its reservation or its call's end.
    remember_s: float = REMEMBER_S
    max_remembered: int = MAX_REMEMBERED
    _pending: dict[str, float] = field(default_factory=dict)  # CallSid -> reserved at
    _live: set[str] = field(default_factory=set)
    # CallSid -> (forget at, has streamed); oldest first.
    _seen: OrderedDict[str, tuple[float, bool]] = field(default_factory=OrderedDict)

    def _prune(self) -> float:
        now = self.clock()
        for sid in [sid for sid, at in self._pending.items() if at + self.reserve_s <= now]:
            del self._pending[sid]  # lapsed; still in _seen: never reserved again
        while self._seen:
            sid, (forget_at, _) = next(iter(self._seen.items()))
            if forget_at > now and len(self._seen) <= self.max_remembered:
                break
            del self._seen[sid]
        return now

    def _remember(self, call_sid: str, now: float, *, streamed: bool) -> None:
        was = self._seen.pop(call_sid, None)
        self._seen[call_sid] = (now + self.remember_s, streamed or (was is not None and was[1]))

    def reserve_now(self, call_sid: str) -> Sighting:
        now = self._prune()
        if call_sid in self._pending:
            return Sighting.PENDING
        if call_sid in self._live or call_sid in self._seen:
            return Sighting.REPEATED
        self._pending[call_sid] = now
        self._remember(call_sid, now, streamed=False)
        return Sighting.NEW

    def seen_now(self, call_sid: str) -> bool:
        self._prune()
        return call_sid in self._live or call_sid in self._seen

    def claim_stream_now(self, call_sid: str) -> bool:
        now = self._prune()
        seen = self._seen.get(call_sid)
        if call_sid in self._live or (seen is not None and seen[1]):
            return False
        self._pending.pop(call_sid, None)
        self._remember(call_sid, now, streamed=True)
        return True

    # The ledger's own interface: the same decisions, awaited like a shared one's.
    async def reserve(self, call_sid: str) -> Sighting:
        return self.reserve_now(call_sid)

    async def seen(self, call_sid: str) -> bool:
        return self.seen_now(call_sid)

    async def claim_stream(self, call_sid: str) -> bool:
        return self.claim_stream_now(call_sid)

    def live(self, call_sid: str) -> None:
        self._prune()
        self._live.add(call_sid)

    def ended(self, call_sid: str) -> None:
        now = self._prune()
        self._live.discard(call_sid)
        self._remember(call_sid, now, streamed=True)

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
