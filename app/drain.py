"""Draining: a gateway that takes no new calls and lets its live calls finish.

`offhook serve` starts draining at SIGTERM: /healthz answers 503 "draining" (a load
balancer stops sending new calls within a health check or two), a voice webhook that
still lands here is refused (503 for the load balancer to retry on another gateway with
REDIS_URL; the busy message on a lone gateway), while streams already given a token,
the live calls and their callbacks go on. The server exits once no call is left, or at
DRAIN_TIMEOUT_S; a stream still open then is closed under the call, which with REDIS_URL
resumes on another gateway (app.call_resume).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

POLL_S = 0.2
LOG_EVERY_S = 10.0
RETRY_AFTER_S = 5  # what a refused webhook's Retry-After says


class Drain:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.since: float | None = None

    @property
    def draining(self) -> bool:
        return self.since is not None

    def begin(self) -> None:
        if self.since is None:
            self.since = self.clock()
            log.info("draining: no new calls; live calls go on until they end")

    async def wait_idle(self, active: Callable[[], int], timeout_s: float) -> bool:
        """Until `active()` is 0 (True) or `timeout_s` has passed (False)."""
        next_log = self.clock()
        try:
            async with asyncio.timeout(timeout_s):
                while (left := active()) > 0:
                    if self.clock() >= next_log:
                        log.info("draining: %d call(s) still live", left)
                        next_log = self.clock() + LOG_EVERY_S
                    await asyncio.sleep(POLL_S)
        except TimeoutError:
            log.warning("draining: %d call(s) still live after %.0f s", active(), timeout_s)
            return False
        log.info("drained: no call left")
        return True
