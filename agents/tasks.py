"""Cancelling a task without swallowing our own cancellation, or leaking its frames."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def shed_traceback(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro`; when it is cancelled, let its CancelledError go on without the
    traceback it gathered inside.

    On Python 3.11 a CancelledError that leaves a TaskGroup is held by the group's
    `__aexit__` frame, which its own traceback holds: a reference cycle. Every frame on
    that traceback (a call's session, its agent, their audio) then lives until Python's
    rare full collection: the server grew by ~10 MB a call and fell back by ~100 MB
    every ten or so (`python -m benchmarks soak`). A task that is cancelled is done; nobody
    reads where inside it the cancellation found it.
    """
    try:
        return await coro
    except asyncio.CancelledError as cancelled:
        raise cancelled.with_traceback(None) from None


def create_task(
    group: asyncio.TaskGroup, coro: Coroutine[Any, Any, T], *, name: str
) -> asyncio.Task[T]:
    """`group.create_task(coro)` under `shed_traceback`.

    A task cancelled before its first step never starts its wrapper, so `coro` would
    never be awaited (and warn so when collected): it is closed once the task is done.
    """
    task = group.create_task(shed_traceback(coro), name=name)
    task.add_done_callback(lambda _: coro.close())
    return task


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and wait for it to finish.

    Its CancelledError is absorbed; ours (if the current task is itself being
    cancelled) is not.
    """
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
    except Exception:
        pass
