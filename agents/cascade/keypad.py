"""Keypad presses, collected into one caller turn once the keys stop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

__all__ = ["KeypadEntry"]


class KeypadEntry:
    """DTMF digits, collected until no key has been pressed for `timeout_ms`: then
    `done` gets them as one entry ("1234#", not four turns)."""

    def __init__(
        self,
        timeout_ms: int,
        done: Callable[[str], Awaitable[None]],
        spawn: Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]],
    ) -> None:
        self._timeout_s = timeout_ms / 1000
        self._done = done
        self._spawn = spawn
        self._digits = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def pending(self) -> bool:
        """Keys were pressed and the entry is not over yet."""
        return self._task is not None

    def press(self, digits: str) -> None:
        self._digits += digits
        if self._task is not None:
            self._task.cancel()
        self._task = self._spawn(self._wait(), "dtmf")

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _wait(self) -> None:
        await asyncio.sleep(self._timeout_s)
        digits, self._digits = self._digits, ""
        self._task = None
        await self._done(digits)
