"""An LLM reply being written in the background, taken out one clause at a time.

Both ways the cascade speaks read replies through it, by way of SpokenReply
(agents/cascade/spoken_reply.py), which synthesises each clause as it is taken. The model
goes on writing while a clause is synthesised, so a reply never waits on the LLM for
more than the next clause.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from types import TracebackType

from agents.cascade.clauses import ClauseSplitter
from agents.cascade.llm import ToolCall
from agents.tasks import cancel_and_wait

__all__ = ["ClauseStream"]


class ClauseStream:
    """The reply's clauses as the model writes them.

    A tool call ends the reply: it is kept (`tool_call`), and nothing written after it is
    spoken. A failure of the model is raised to whoever takes the clause after the last
    one written before it, so what was written still gets said.
    """

    def __init__(self, items: AsyncIterator[str | ToolCall], *, name: str = "reply-llm") -> None:
        self._ready: deque[str] = deque()
        self._written = False
        self._error: Exception | None = None
        self._changed = asyncio.Event()
        self.tool_call: ToolCall | None = None
        self._task = asyncio.create_task(self._write(items), name=name)

    async def _write(self, items: AsyncIterator[str | ToolCall]) -> None:
        splitter = ClauseSplitter()
        try:
            async for item in items:
                if isinstance(item, ToolCall):
                    self.tool_call = item
                    break
                self._add(splitter.feed(item))
            self._add(splitter.flush())
        except Exception as exc:
            self._error = exc
        finally:
            self._written = True
            self._changed.set()

    def _add(self, clauses: list[str]) -> None:
        if clauses:
            self._ready.extend(clauses)
            self._changed.set()

    @property
    def over(self) -> bool:
        """Every clause has been taken and the model is done."""
        return self._written and not self._ready

    @property
    def completed(self) -> bool:
        """The model ended its reply itself: neither failed nor was cancelled."""
        return self._written and self._error is None and not self._task.cancelled()

    async def next_clause(self, within_s: float | None = None) -> str | None:
        """The next clause, waiting for the model up to `within_s`; None once the reply is
        over (written out, or ended by a tool call).

        Raises TimeoutError when the model has not written the next clause in time, and
        the model's own error once the clauses written before it are taken.
        """
        if not self._ready and not self._written:
            if within_s is not None and within_s <= 0:
                raise TimeoutError
            async with asyncio.timeout(within_s):
                while not self._ready and not self._written:
                    self._changed.clear()
                    await self._changed.wait()
        if self._ready:
            return self._ready.popleft()
        if self._error is not None:
            raise self._error
        return None

    def cancel(self) -> None:
        """Stop writing (the caller barged in, or the reply is dropped)."""
        self._task.cancel()

    async def aclose(self) -> None:
        """Stop writing and wait until the model's stream is closed."""
        await cancel_and_wait(self._task)

    async def __aenter__(self) -> ClauseStream:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
