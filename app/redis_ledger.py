"""The call ledger on Redis (or Valkey), shared by every gateway (REDIS_URL).

One stream per CallSid and single-use stream tokens then hold across gateways: a token
replayed on another gateway, or Twilio's webhook repeated there for a live call, is
refused like a repeat on this one. Per CallSid, with the CallSid as hash tag:

- `PREFIX{CallSid}:call`: "reserved" or "streamed"; TTL `remember_s`, set again while
  its call is live, so it outlives no call by more than that;
- `PREFIX{CallSid}:reserved`: its reservation's window (TTL `reserve_s`): a repeat
  inside it is Twilio's duplicate delivery;
- `PREFIX{CallSid}:live`: the gateway holding the call (TTL `live_ttl_s`), set again by a
  heartbeat: a gateway that dies leaves nothing behind for long.

Every key expires; a restarted, empty Redis learns the live calls again at the next
heartbeat. Redis is only ever asked, never waited on: a command gets `timeout_s`, and
without an answer the decision is this gateway's own `LocalCallLedger`'s, which has seen
every call this gateway did. A Redis that refuses connections is asked again at the next
decision; one that timed out is not asked for `retry_after_s` (a hung Redis would
otherwise cost every webhook the timeout). The outage is logged and counted
(offhook_redis_errors_total, offhook_redis_fallbacks_total, offhook_redis_up). While
Redis answers, both ledgers decide: a CallSid either one has seen stream is refused.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from agents.bounded_stop import cancel_within, finish_within
from app.call_ledger import LocalCallLedger, Sighting
from app.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

TIMEOUT_S = 0.25  # a webhook must not wait on a Redis that went away
RETRY_AFTER_S = 1.0  # after a timeout, decide locally this long before asking again
LIVE_TTL_S = 30.0
HEARTBEAT_S = 10.0  # three heartbeats per TTL: one lost beat loses no live call
OUTAGE_LOG_S = 30.0  # an outage's log line is repeated at most this often

# Reserve once; a repeat inside the reservation's window is a duplicate delivery.
_RESERVE = """
local state = redis.call('GET', KEYS[1])
if not state then
  redis.call('SET', KEYS[1], 'reserved', 'PX', ARGV[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
  return 'new'
end
if state == 'reserved' and redis.call('EXISTS', KEYS[2]) == 1 then
  return 'pending'
end
return 'repeated'
"""

# One stream per CallSid: claimed once, whichever gateway the stream reaches.
_CLAIM = """
if redis.call('GET', KEYS[1]) == 'streamed' then
  return 0
end
redis.call('SET', KEYS[1], 'streamed', 'PX', ARGV[1])
redis.call('DEL', KEYS[2])
return 1
"""

_SEVERITY = {Sighting.NEW: 0, Sighting.PENDING: 1, Sighting.REPEATED: 2}


def redis_client(url: str, *, timeout_s: float = TIMEOUT_S) -> Redis:
    """A client that fails fast: no waits longer than `timeout_s`, and one immediate retry,
    for the pooled connection a restarted Redis closed (the next one is fresh)."""
    client: Redis = Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1),
    )
    return client


class RedisCallLedger:
    """A `CallLedger` on Redis, with this gateway's `LocalCallLedger` as its fallback."""

    def __init__(
        self,
        client: Redis,
        *,
        local: LocalCallLedger,
        holder: str,
        metrics: Metrics,
        prefix: str = "offhook:",
        timeout_s: float = TIMEOUT_S,
        retry_after_s: float = RETRY_AFTER_S,
        live_ttl_s: float = LIVE_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.local = local
        self.holder = holder
        self.metrics = metrics
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.retry_after_s = retry_after_s
        self.live_ttl_s = live_ttl_s
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self._reserve = client.register_script(_RESERVE)
        self._claim = client.register_script(_CLAIM)
        self._here: set[str] = set()  # live calls on this gateway, kept alive by heartbeat
        self._writes: set[asyncio.Task[None]] = set()
        self._write_order = asyncio.Lock()  # FIFO: a call's `ended` never precedes its `live`
        self._heartbeat: asyncio.Task[None] | None = None
        self._closing = False
        self._down_until = 0.0
        self._outage_since: float | None = None
        self._outage_logged = 0.0
        self._fallbacks = 0

    # --- keys --------------------------------------------------------------------------

    def _keys(self, call_sid: str) -> tuple[str, str, str]:
        tag = f"{self.prefix}{{{call_sid}}}"
        return f"{tag}:call", f"{tag}:reserved", f"{tag}:live"

    @property
    def _remember_ms(self) -> int:
        return int(self.local.remember_s * 1000)

    # --- the ledger --------------------------------------------------------------------

    async def reserve(self, call_sid: str) -> Sighting:
        here = self.local.reserve_now(call_sid)
        call, reserved, _ = self._keys(call_sid)
        reserve_ms = int(self.local.reserve_s * 1000)
        answer = await self._ask(
            "reserve",
            lambda: self._reserve(keys=[call, reserved], args=[self._remember_ms, reserve_ms]),
            decision=True,
        )
        if answer is None:
            return here
        shared = Sighting(answer)
        return max(here, shared, key=_SEVERITY.__getitem__)

    async def seen(self, call_sid: str) -> bool:
        if self.local.seen_now(call_sid):
            return True
        call, _, _ = self._keys(call_sid)
        answer = await self._ask("seen", lambda: self.client.exists(call), decision=True)
        return bool(answer)

    async def claim_stream(self, call_sid: str) -> bool:
        if not self.local.claim_stream_now(call_sid):
            return False
        call, reserved, _ = self._keys(call_sid)
        answer = await self._ask(
            "claim_stream",
            lambda: self._claim(keys=[call, reserved], args=[self._remember_ms]),
            decision=True,
        )
        return answer is None or bool(answer)

    def live(self, call_sid: str) -> None:
        self.local.live(call_sid)
        self._here.add(call_sid)
        self._write("live", lambda: self._mark_live([call_sid]))

    def ended(self, call_sid: str) -> None:
        self.local.ended(call_sid)
        self._here.discard(call_sid)
        self._write("ended", lambda: self._mark_ended(call_sid))

    async def start(self) -> None:
        """Begin the heartbeat (which also tells /metrics whether Redis answers)."""
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(self._beat(), name="redis-heartbeat")

    async def aclose(self) -> None:
        # Each step is bounded: a heartbeat that lost its cancel, or a close that never
        # answers, must not hang the gateway's shutdown (bounded_stop).
        self._closing = True
        if self._heartbeat is not None:
            await cancel_within(self._heartbeat, "The Redis ledger's heartbeat")
        if self._writes:  # each is bounded by timeout_s, but they queue on one lock
            writes = asyncio.gather(*self._writes, return_exceptions=True)
            await finish_within(writes, "The Redis ledger's last writes")
        await finish_within(self.client.aclose(), "Closing the Redis ledger's client")

    # --- writes that no call waits for ---------------------------------------------------

    async def _mark_live(self, call_sids: list[str]) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for sid in call_sids:
                call, _, live = self._keys(sid)
                pipe.set(live, self.holder, px=int(self.live_ttl_s * 1000))
                pipe.set(call, "streamed", px=self._remember_ms)
            await pipe.execute()

    async def _mark_ended(self, call_sid: str) -> None:
        call, _, live = self._keys(call_sid)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.delete(live)
            pipe.set(call, "streamed", px=self._remember_ms)
            await pipe.execute()

    def _write(self, op: str, command: Callable[[], Awaitable[Any]]) -> None:
        if self._closing:
            return  # after aclose took its last writes: the local ledger has it
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a unit test's sync call): the heartbeat writes live calls

        async def ordered() -> None:
            async with self._write_order:
                await self._ask(op, command, decision=False)

        task = loop.create_task(ordered(), name=f"redis-{op}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _beat(self) -> None:
        while not self._closing:  # not only the cancel, which an await can lose (bounded_stop)
            here = sorted(self._here)
            if here:
                # SET, not EXPIRE: a Redis restarted empty learns these calls again.
                await self._ask(
                    "heartbeat",
                    functools.partial(self._mark_live, here),
                    decision=False,
                    retry_now=True,
                )
            else:
                await self._ask("heartbeat", self.client.ping, decision=False, retry_now=True)
            if self._closing:
                return
            up = self._outage_since is None
            await asyncio.sleep(self.heartbeat_s if up else min(self.heartbeat_s, 1.0))

    # --- asking Redis --------------------------------------------------------------------

    async def _ask(
        self,
        op: str,
        command: Callable[[], Awaitable[T]],
        *,
        decision: bool,
        retry_now: bool = False,
    ) -> T | None:
        """Redis's answer, or None when it has none in time (the caller decides locally)."""
        if not retry_now and self.clock() < self._down_until:
            self._fell_back(op, decision)
            return None
        began = self.clock()
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await command()
        except (RedisError, OSError, TimeoutError) as exc:
            self.metrics.redis_errors.labels(op=op).inc()
            # A Redis that refuses at once costs nothing to ask again, and is used the
            # moment it is back; one that hangs would cost every webhook the timeout.
            slow = self.clock() - began >= self.timeout_s / 2
            self._went_down(exc, hold_off=slow)
            self._fell_back(op, decision)
            return None
        self._came_back()
        return answer

    def _fell_back(self, op: str, decision: bool) -> None:
        if decision:
            self._fallbacks += 1
            self.metrics.redis_fallbacks.labels(op=op).inc()

    def _went_down(self, exc: BaseException, *, hold_off: bool) -> None:
        now = self.clock()
        if hold_off:
            self._down_until = now + self.retry_after_s
        self.metrics.redis_up.set(0)
        reason = f"{type(exc).__name__}: {exc}"
        if self._outage_since is None:
            self._outage_since = self._outage_logged = now
            log.warning("Redis unavailable (%s): admission falls back to local checks", reason)
        elif now - self._outage_logged >= OUTAGE_LOG_S:
            self._outage_logged = now
            log.warning(
                "Redis still unavailable after %.0f s (%s); %d decision(s) taken locally",
                now - self._outage_since,
                reason,
                self._fallbacks,
            )

    def _came_back(self) -> None:
        self.metrics.redis_up.set(1)
        self._down_until = 0.0
        if self._outage_since is not None:
            log.warning(
                "Redis is back after %.1f s; %d admission decision(s) were taken locally",
                self.clock() - self._outage_since,
                self._fallbacks,
            )
            self._outage_since = None
            self._fallbacks = 0
