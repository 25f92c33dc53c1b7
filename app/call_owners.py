"""Which gateway holds a call, how its stream ended, and what Twilio said of it early.

Behind one public URL, Twilio's callbacks about a call (its status, the answering-machine
verdict, the webhook that resumes it after a lost stream) land on any gateway. These
records let that gateway hand them to the one holding the call, and tell a call the bot
ended on purpose from one whose gateway died:

- `hold` when a call's stream starts (kept alive by a heartbeat while it lasts);
- `release` before the gateway closes the stream, saying whether the call may be
  resumed elsewhere (only when the stream dropped under the gateway);
- `keep_early` / `take_early`: reports that came before the stream started, for
  whichever gateway the stream lands on.

`LocalCallOwners` keeps them in this process (one gateway: the embedded default);
`RedisCallOwners` on the Redis every gateway shares (REDIS_URL). Every Redis key expires;
a Redis that fails is logged and counted, and its answer is "unknown", which the callers
take as "handle it here, as one gateway would".
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agents.bounded_stop import cancel_within, finish_within
from app.metrics import Metrics
from app.redis_ledger import redis_client
from app.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")

LIVE_TTL_S = 30.0  # a dead gateway's calls are forgotten this long after its last beat
HEARTBEAT_S = 5.0
# How long a call's end is remembered: Twilio's last status callback and a resume
# webhook come within seconds of it.
ENDED_TTL_S = 600.0
EARLY_TTL_S = 300.0  # an outbound call rings at most ~60 s before its stream starts
MAX_EARLY_REPORTS = 50  # per call
MAX_CALLS_KEPT = 1000  # calls the local table remembers, oldest dropped first
TIMEOUT_S = 0.25  # a callback or a closing call never waits longer on Redis
OUTAGE_LOG_S = 30.0

EarlyReport = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Holder:
    """The gateway a call's stream is (or was last) on."""

    gateway: str
    live: bool
    # Ended: may the call be resumed on another stream? Only when the stream dropped
    # under the gateway; never for a call it ended on purpose (farewell, limits, errors).
    resumable: bool = False


class CallOwners(Protocol):
    gateway: str  # this gateway's own address, as the others reach it

    async def hold(self, call_sid: str) -> None: ...

    async def release(self, call_sid: str, *, resumable: bool) -> None: ...

    async def holder(self, call_sid: str) -> Holder | None:
        """Who holds it; None when nobody is known to (or the store is unreachable)."""
        ...

    async def keep_early(self, call_sid: str, report: EarlyReport) -> bool:
        """Keep a report for the call's stream to come; False if it could not be kept."""
        ...

    async def take_early(self, call_sid: str) -> list[EarlyReport]:
        """The reports kept for this call, oldest first; each is taken once."""
        ...

    async def start(self, on_early: Callable[[str, list[EarlyReport]], None]) -> None:
        """Begin the heartbeat; reports that arrive for a live call go to `on_early`."""
        ...

    async def aclose(self) -> None: ...


def own_gateway_url(settings: Settings) -> str:
    """GATEWAY_URL, or this process's listening address (one host only)."""
    if settings.gateway_url:
        return settings.gateway_url.rstrip("/")
    host = settings.bind_host
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{settings.port}"


class LocalCallOwners:
    """This process's own calls: every callback lands here, so nothing is forwarded."""

    def __init__(self, gateway: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.gateway = gateway
        self.clock = clock
        self._holders: OrderedDict[str, tuple[float, Holder]] = OrderedDict()  # expires at
        self._early: OrderedDict[str, tuple[float, list[EarlyReport]]] = OrderedDict()

    def _prune(self) -> float:
        now = self.clock()
        for table in (self._holders, self._early):
            for sid in [sid for sid, (until, _) in table.items() if until <= now]:
                del table[sid]
            while len(table) > MAX_CALLS_KEPT:
                table.popitem(last=False)
        return now

    async def hold(self, call_sid: str) -> None:
        # A live call is held for as long as it lasts: its release replaces this.
        self._holders[call_sid] = (float("inf"), Holder(self.gateway, live=True))
        self._holders.move_to_end(call_sid)

    async def release(self, call_sid: str, *, resumable: bool) -> None:
        now = self._prune()
        ended = Holder(self.gateway, live=False, resumable=resumable)
        self._holders[call_sid] = (now + ENDED_TTL_S, ended)
        self._holders.move_to_end(call_sid)

    async def holder(self, call_sid: str) -> Holder | None:
        self._prune()
        held = self._holders.get(call_sid)
        return held[1] if held is not None else None

    async def keep_early(self, call_sid: str, report: EarlyReport) -> bool:
        now = self._prune()
        _, reports = self._early.pop(call_sid, (0.0, []))
        self._early[call_sid] = (now + EARLY_TTL_S, [*reports, report][-MAX_EARLY_REPORTS:])
        return True

    async def take_early(self, call_sid: str) -> list[EarlyReport]:
        self._prune()
        return self._early.pop(call_sid, (0.0, []))[1]

    async def start(self, on_early: Callable[[str, list[EarlyReport]], None]) -> None:
        return  # the callbacks deliver to this process's live calls themselves

    async def aclose(self) -> None:
        return


class RedisCallOwners:
    """The same records on Redis, per CallSid (the CallSid as hash tag):

    - `PREFIX{CallSid}:holder`: {"gateway", "live", "resumable"}; TTL LIVE_TTL_S while
      live (set again by the heartbeat), ENDED_TTL_S once ended;
    - `PREFIX{CallSid}:early`: a list of JSON reports, TTL EARLY_TTL_S.
    """

    def __init__(
        self,
        client: Redis,
        *,
        gateway: str,
        metrics: Metrics,
        prefix: str = "offhook:",
        timeout_s: float = TIMEOUT_S,
        live_ttl_s: float = LIVE_TTL_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.client = client
        self.gateway = gateway
        # This gateway's own calls, known here even while Redis is away.
        self.local = LocalCallOwners(gateway)
        self.metrics = metrics
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.live_ttl_s = live_ttl_s
        self.heartbeat_s = heartbeat_s
        self._here: set[str] = set()
        self._beat: asyncio.Task[None] | None = None
        self._closing = False
        self._on_early: Callable[[str, list[EarlyReport]], None] = lambda sid, reports: None
        self._outage_since: float | None = None
        self._outage_logged = 0.0

    def _key(self, call_sid: str, what: str) -> str:
        return f"{self.prefix}{{{call_sid}}}:{what}"

    async def hold(self, call_sid: str) -> None:
        self._here.add(call_sid)
        await self.local.hold(call_sid)
        await self._ask("owner_hold", lambda: self._set_live([call_sid]))

    async def _set_live(self, call_sids: list[str]) -> None:
        value = json.dumps({"gateway": self.gateway, "live": True})
        async with self.client.pipeline(transaction=False) as pipe:
            for sid in call_sids:
                pipe.set(self._key(sid, "holder"), value, px=int(self.live_ttl_s * 1000))
            await pipe.execute()

    async def release(self, call_sid: str, *, resumable: bool) -> None:
        self._here.discard(call_sid)
        await self.local.release(call_sid, resumable=resumable)
        value = json.dumps({"gateway": self.gateway, "live": False, "resumable": resumable})
        key = self._key(call_sid, "holder")
        await self._ask("owner_release", lambda: self.client.set(key, value, ex=int(ENDED_TTL_S)))

    async def holder(self, call_sid: str) -> Holder | None:
        if (own := await self.local.holder(call_sid)) is not None:
            return own
        key = self._key(call_sid, "holder")
        raw = await self._ask("owner_lookup", lambda: self.client.get(key))
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return Holder(str(data["gateway"]), bool(data["live"]), bool(data.get("resumable")))
        except (ValueError, KeyError, TypeError):
            log.warning("call %s: unreadable holder record %r", call_sid, raw[:100])
            return None

    async def keep_early(self, call_sid: str, report: EarlyReport) -> bool:
        key = self._key(call_sid, "early")

        async def push() -> bool:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.rpush(key, json.dumps(report))
                pipe.ltrim(key, -MAX_EARLY_REPORTS, -1)
                pipe.expire(key, int(EARLY_TTL_S))
                await pipe.execute()
            return True

        return bool(await self._ask("early_keep", push))

    async def take_early(self, call_sid: str) -> list[EarlyReport]:
        key = self._key(call_sid, "early")

        async def take() -> list[str]:
            # One transaction: a report pushed meanwhile is taken now or left for later.
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.lrange(key, 0, -1)
                pipe.delete(key)
                raw, _ = await pipe.execute()
            return [str(item) for item in raw]

        reports: list[EarlyReport] = []
        for item in await self._ask("early_take", take) or []:
            try:
                report = json.loads(item)
            except ValueError:
                continue
            if isinstance(report, dict):
                reports.append(report)
        return reports

    async def start(self, on_early: Callable[[str, list[EarlyReport]], None]) -> None:
        self._on_early = on_early
        self._beat = asyncio.create_task(self._heartbeat(), name="call-owners-heartbeat")

    async def aclose(self) -> None:
        # Bounded, like the ledger's: a lost cancel or a hung close must not hang the
        # gateway's shutdown (bounded_stop).
        self._closing = True
        if self._beat is not None:
            await cancel_within(self._beat, "The call owners' heartbeat")
        await finish_within(self.client.aclose(), "Closing the call owners' Redis client")

    async def _heartbeat(self) -> None:
        while not self._closing:  # not only the cancel, which an await can lose (bounded_stop)
            await asyncio.sleep(self.heartbeat_s)
            here = sorted(self._here)
            if not here:
                continue
            # SET, not EXPIRE: a Redis restarted empty learns these calls again.
            await self._ask("owner_heartbeat", functools.partial(self._set_live, here))
            if self._closing:
                return
            # A report that raced the stream's start (kept after it was taken) is
            # delivered now, a beat late rather than never.
            for sid in here:
                if self._closing:
                    return
                reports = await self.take_early(sid)
                if reports and sid in self._here:
                    self._on_early(sid, reports)

    async def _ask(self, op: str, command: Callable[[], Awaitable[T]]) -> T | None:
        """Redis's answer, or None when it has none in time (the caller decides locally)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await command()
        except (RedisError, OSError, TimeoutError) as exc:
            self.metrics.redis_errors.labels(op=op).inc()
            now = time.monotonic()
            if self._outage_since is None or now - self._outage_logged >= OUTAGE_LOG_S:
                self._outage_since = self._outage_since or now
                self._outage_logged = now
                log.warning(
                    "Redis unavailable for call ownership (%s: %s): callbacks handled here",
                    type(exc).__name__,
                    exc,
                )
            return None
        if self._outage_since is not None:
            back_after = time.monotonic() - self._outage_since
            log.warning("Redis is back for call ownership after %.1f s", back_after)
            self._outage_since = None
        return answer


def call_owners(settings: Settings, metrics: Metrics) -> CallOwners:
    """On Redis with REDIS_URL, else this process's own."""
    gateway = own_gateway_url(settings)
    if not settings.redis_url:
        return LocalCallOwners(gateway)
    return RedisCallOwners(redis_client(settings.redis_url), gateway=gateway, metrics=metrics)
