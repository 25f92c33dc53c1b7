"""Whether the LLM can answer now: embedded servers supervised, a hosted endpoint watched.

Readiness (`ready`) is what /healthz reports and what new calls are admitted on: a bot
whose LLM cannot answer could only apologise to every caller. The chat pool asks
`alive` before it sends a reply to a member, waits (`wait_alive`) while none is, and
tells the health what it found (`unreachable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from agents.cascade.llm import ChatModel
from agents.cascade.llm_server import EmbeddedLlamaServer

log = logging.getLogger(__name__)

RESTART_BACKOFF_S = 0.5  # first restart; doubled after each start that did not last
RESTART_BACKOFF_MAX_S = 30.0
STABLE_S = 60.0  # a server up this long had a real life: its next crash restarts at once
CRASH_LOOP = 3  # this many short lives in a row: a crash loop, said so in the log
HOSTED_CHECK_S = 5.0
RECOVERY_GRACE_S = 10.0
CLEAN_STOP_WAIT_S = 2.0
SUSPECT_S = 2.0  # a member a reply could not reach is left alone this long
WAIT_POLL_S = 0.05
HOSTED_LOG_EVERY_S = 60.0


class LlmHealth(Protocol):
    @property
    def ready(self) -> bool:
        """Some member can answer a reply now."""
        ...

    @property
    def reason(self) -> str:
        """Why not ready (empty when ready)."""
        ...

    def alive(self, index: int) -> bool:
        """Member `index` can be sent a reply."""
        ...

    async def wait_alive(self, timeout_s: float) -> bool:
        """Wait until some member is alive; False after `timeout_s`."""
        ...

    def unreachable(self, index: int, error: str) -> None:
        """A reply could not reach member `index` (connection refused or dropped)."""
        ...

    @property
    def recovering(self) -> bool:
        """Not ready, but answered until less than RECOVERY_GRACE_S ago: a restart takes
        seconds and a new call's first question comes later, so new calls are still
        welcome (their replies wait for it)."""
        ...

    async def run(self) -> None:
        """Watch (and restart) until cancelled."""
        ...


class _Liveness:
    """Which members are up, an event for "some member is", and since when none is
    (after some had been: a start that never answered is not a recovery)."""

    def __init__(self, count: int, *, up: bool) -> None:
        self._up = [up] * count
        self._any = asyncio.Event()
        self.down_since: float | None = None
        if up:
            self._any.set()

    def set(self, index: int, up: bool) -> None:
        self._up[index] = up
        if any(self._up):
            self._any.set()
            self.down_since = None
        else:
            if self._any.is_set():
                self.down_since = time.monotonic()
            self._any.clear()

    def recovering(self) -> bool:
        down = self.down_since
        return down is not None and time.monotonic() - down < RECOVERY_GRACE_S

    def __getitem__(self, index: int) -> bool:
        return self._up[index]

    async def wait_any(self, timeout_s: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._any.wait()
        return self._any.is_set()


class EmbeddedLlmSupervisor:
    """Watches started embedded servers; one that dies (crash, OOM kill, SIGKILL) is
    noticed at once, marked down, and restarted on its own port with backoff, its prompt
    cache warmed with `warm_messages` again before it takes replies."""

    def __init__(
        self,
        servers: Sequence[EmbeddedLlamaServer],
        *,
        warm_messages: Sequence[dict[str, str]],
        on_restart: Callable[[], None] | None = None,
        backoff_s: float = RESTART_BACKOFF_S,
    ) -> None:
        self.servers = list(servers)
        self.warm_messages = list(warm_messages)
        self.on_restart = on_restart
        self.restarts = 0
        self._backoff_s = backoff_s
        self._live = _Liveness(len(self.servers), up=True)
        self._causes = [""] * len(self.servers)
        # Members a reply could not reach, until this time: a death the process watch
        # has not seen yet (the child is reaped a moment later) must not be asked again.
        self._suspect_until = [0.0] * len(self.servers)

    @property
    def ready(self) -> bool:
        return any(self.alive(index) for index in range(len(self.servers)))

    @property
    def reason(self) -> str:
        if self.ready:
            return ""
        # A death the watcher has not handled yet (it is reaped before the watcher runs)
        # is still said, from the process's own exit.
        known = (
            cause or (server.exit_reason or "")
            for cause, server in zip(self._causes, self.servers, strict=True)
        )
        causes = "; ".join(cause for cause in known if cause)
        return f"no embedded LLM server is up ({causes or 'restarting'})"

    def alive(self, index: int) -> bool:
        # The process check sees a death before the watcher has run.
        return (
            self._live[index]
            and self.servers[index].running
            and time.monotonic() >= self._suspect_until[index]
        )

    @property
    def recovering(self) -> bool:
        return not self.ready and (
            self._live.recovering() or all(self._live[i] for i in range(len(self.servers)))
        )

    async def wait_alive(self, timeout_s: float) -> bool:
        # Polled: liveness also turns on a process reaped, or a suspicion lapsing, which
        # no event announces.
        deadline = time.monotonic() + timeout_s
        while not self.ready:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(WAIT_POLL_S)
        return True

    def unreachable(self, index: int, error: str) -> None:
        # Most likely dead and not yet reaped; if the process lives on, it was a stall,
        # and it is asked again once the suspicion lapses.
        log.debug("embedded LLM %d unreachable: %s", index, error)
        self._suspect_until[index] = time.monotonic() + SUSPECT_S

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for index in range(len(self.servers)):
                group.create_task(self._watch(index), name=f"llm-watch-{index}")

    async def _watch(self, index: int) -> None:
        server = self.servers[index]
        short_lives = 0
        while True:
            started = time.monotonic()
            cause = await server.wait_exit()
            if server.stopping:
                return
            self._live.set(index, False)
            self._causes[index] = cause
            lived = time.monotonic() - started
            short_lives = short_lives + 1 if lived < STABLE_S else 0
            if server.stopped_cleanly:
                # Stopped from outside (SIGTERM to the whole service, as systemd does):
                # our own shutdown is most likely under way and cancels this first.
                log.warning("embedded LLM server %d %s; restarting", index, cause)
                await asyncio.sleep(CLEAN_STOP_WAIT_S)
            else:
                log.error(
                    "embedded LLM server %d (127.0.0.1:%d) %s; restarting",
                    index,
                    server.port,
                    cause,
                )
            await self._restart(index, short_lives)

    async def _restart(self, index: int, short_lives: int) -> None:
        server = self.servers[index]
        failures = short_lives
        while True:
            delay = min(self._backoff_s * 2 ** max(failures - 1, 0), RESTART_BACKOFF_MAX_S)
            if failures >= CRASH_LOOP:
                log.error(
                    "embedded LLM server %d keeps crashing (%d short lives in a row; last: %s);"
                    " next restart in %.1f s",
                    index,
                    failures,
                    self._causes[index],
                    delay,
                )
            await asyncio.sleep(delay if failures else 0.0)
            try:
                await server.start(warm_messages=self.warm_messages)
            except Exception as exc:  # an OSError spawning it too: never end supervision
                failures += 1
                self._causes[index] = str(exc) or type(exc).__name__
                log.error("embedded LLM server %d did not restart: %s", index, exc)
                continue
            self.restarts += 1
            if self.on_restart is not None:
                self.on_restart()
            self._causes[index] = ""
            self._suspect_until[index] = 0.0
            self._live.set(index, True)
            log.warning("embedded LLM server %d restarted (pid %s)", index, server.pid)
            return


class HostedLlmWatch:
    """A hosted LLM (LLM_BASE_URL) is another service: down at start, we still start,
    say so loudly, report not ready, and keep asking it until it answers. A reply that
    cannot reach it marks it down again."""

    def __init__(
        self,
        chat: ChatModel,
        url: str,
        *,
        probe_messages: Sequence[dict[str, str]],
        every_s: float = HOSTED_CHECK_S,
    ) -> None:
        self.chat = chat
        self.url = url
        self.probe_messages = list(probe_messages)
        self.every_s = every_s
        self._live = _Liveness(1, up=False)
        self._down = asyncio.Event()
        self._error = "not asked yet"

    @property
    def ready(self) -> bool:
        return self._live[0]

    @property
    def reason(self) -> str:
        return "" if self.ready else f"the LLM at {self.url} is not answering ({self._error})"

    def alive(self, index: int) -> bool:
        return self._live[0]

    @property
    def recovering(self) -> bool:
        return self._live.recovering()

    async def wait_alive(self, timeout_s: float) -> bool:
        return await self._live.wait_any(timeout_s)

    def unreachable(self, index: int, error: str) -> None:
        if self._live[0]:
            log.error("the LLM at %s stopped answering (%s); not ready for calls", self.url, error)
        self._error = error
        self._live.set(0, False)
        self._down.set()

    async def check(self) -> bool:
        """Ask it once; True if it answered."""
        deltas = self.chat.stream(self.probe_messages)
        try:
            async for _ in deltas:
                break
        except Exception as exc:  # whatever it answered, it did not answer well
            self._error = str(exc) or type(exc).__name__
            return False
        finally:
            close = getattr(deltas, "aclose", None)  # an async generator: end its request
            if close is not None:
                await close()
        was_down = not self._live[0]
        self._live.set(0, True)
        self._down.clear()
        if was_down:
            log.info("the LLM at %s answers; ready for calls", self.url)
        return True

    async def run(self) -> None:
        logged = -HOSTED_LOG_EVERY_S
        while True:
            if self._live[0]:
                await self._down.wait()
                continue
            if not await self.check():
                now = time.monotonic()
                if now - logged >= HOSTED_LOG_EVERY_S:
                    logged = now
                    log.error(
                        "the LLM at %s is not answering (%s): not ready for calls until it "
                        "does; asking again every %.0f s",
                        self.url,
                        self._error,
                        self.every_s,
                    )
                await asyncio.sleep(self.every_s)
