"""Cancelling a task without swallowing our own cancellation."""

from __future__ import annotations

import asyncio
from typing import Any


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
