"""Shutting down background work without trusting it to end when told.

On Python 3.11, `asyncio.wait_for` returns its result when a cancel lands in the loop
turn after the awaited work finished (CPython gh-86296), and redis-py sends every
command through it: a heartbeat cancelled then goes on beating. Once, in CI, a ledger's
`aclose` waited until the test's 300 s timeout, probably on such a heartbeat (not
reproduced). So each shutdown step gets a bound, and a step that outlives it is logged
by name and left behind. Here, below both of its users: the gateway's Redis-backed
services (app) and the shared duplex worker pool (agents.duplex.shared_pool).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

STOP_S = 2.0  # one shutdown step of a Redis-backed service waits no longer than this


async def finish_within(work: Awaitable[Any], what: str, within_s: float = STOP_S) -> None:
    """Wait for `work` at most `within_s`, then go on; its failure is logged, not raised:
    at shutdown no one is left to handle it."""
    task = asyncio.ensure_future(work)
    task.add_done_callback(_log_failure(what))
    # asyncio.wait, not wait_for or timeout: on 3.11 both of those wait for the cancelled
    # work to end, which is the hang this bounds.
    try:
        done, _ = await asyncio.wait({task}, timeout=within_s)
    except asyncio.CancelledError:
        task.cancel()  # our caller gave up: the step is not left running unseen
        raise
    if not done:
        task.cancel()
        log.warning("%s did not end within %.1f s at shutdown; going on without it", what, within_s)


async def cancel_within(task: asyncio.Task[Any], what: str, within_s: float = STOP_S) -> None:
    """Cancel `task` and wait for it at most `within_s`. A task whose awaits may lose the
    cancel should also stop on a flag of its own at each turn."""
    task.cancel()
    await finish_within(task, what, within_s)


def _log_failure(what: str) -> Callable[[asyncio.Future[Any]], None]:
    def retrieve(task: asyncio.Future[Any]) -> None:
        # Retrieved here, done now or later, so asyncio never reports it as unretrieved.
        if task.cancelled():
            return
        failure = task.exception()
        # A cancelled gather ends with the CancelledError as its exception, not cancelled.
        if failure is not None and not isinstance(failure, asyncio.CancelledError):
            log.warning("%s failed at shutdown", what, exc_info=failure)

    return retrieve
