"""One reply on its way to the caller's ear: the LLM's words cut into clauses, each
clause synthesised when its turn to be heard comes.

Both ways the cascade speaks take their replies from it. The in-process reply writer
(agents/cascade/reply_writer.py) plays each clause as it comes; the duplex cascade
backend (agents/duplex/cascade_backend.py) takes clauses until a unit's worth of audio
is queued ahead of the caller. So both time a reply's first token and first audio the
same way, and both treat a reply with nothing speakable in it as a failed one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from agents.cascade.clause_stream import ClauseStream
from agents.cascade.llm import ToolCall
from agents.errors import LanguageModelError

__all__ = ["SpokenClause", "SpokenReply"]

Synthesize = Callable[[str], Awaitable[np.ndarray]]


@dataclass(frozen=True, slots=True)
class SpokenClause:
    """A clause of the reply, synthesised, and how long that took."""

    text: str
    pcm: np.ndarray
    synthesised_s: float


class SpokenReply:
    """The reply's clauses as audio, in order.

    `on_first_token(elapsed_s)` is told when the model's first words arrive and
    `on_first_audio(elapsed_s, text)` when the first clause is synthesised, both counted
    from `started` (a `time.perf_counter()` reading; by default, now). A tool call ends
    the reply (`tool_call`): nothing the model writes after it is spoken. Close it
    (`aclose`, or `contextlib.aclosing`) once done with it: the model may still be writing.
    """

    def __init__(
        self,
        items: AsyncIterator[str | ToolCall],
        synthesize: Synthesize,
        *,
        name: str,
        started: float | None = None,
        on_first_token: Callable[[float], None] | None = None,
        on_first_audio: Callable[[float, str], None] | None = None,
    ) -> None:
        self._started = time.perf_counter() if started is None else started
        self._on_first_token = on_first_token
        self._on_first_audio = on_first_audio
        self._synthesize = synthesize
        self._spoken = 0  # clauses synthesised
        self._clauses = ClauseStream(self._timed(items), name=name)

    async def _timed(self, items: AsyncIterator[str | ToolCall]) -> AsyncIterator[str | ToolCall]:
        first = True
        async for item in items:
            if first and not isinstance(item, ToolCall):
                first = False
                if self._on_first_token is not None:
                    self._on_first_token(time.perf_counter() - self._started)
            yield item

    @property
    def tool_call(self) -> ToolCall | None:
        return self._clauses.tool_call

    @property
    def over(self) -> bool:
        """Every clause has been taken and the model is done."""
        return self._clauses.over

    @property
    def said_anything(self) -> bool:
        return self._spoken > 0

    async def next(
        self,
        *,
        within_s: float | None = None,
        before_synthesis: Callable[[], Awaitable[None]] | None = None,
    ) -> SpokenClause | None:
        """The next clause, synthesised; None once the reply is over.

        Waits for the model up to `within_s` (TimeoutError past it: no clause is lost).
        `before_synthesis` is awaited between taking the clause and synthesising it.
        Raises the model's error once the clauses written before it are spoken, and
        LanguageModelError when the model ended a reply with nothing to say (empty, or
        only markup) and no tool call: the caller must not be left in silence.
        """
        text = await self._clauses.next_clause(within_s)
        if text is None:
            if not self._spoken and self._clauses.completed and self.tool_call is None:
                raise LanguageModelError("the model's reply had nothing to say")
            return None
        if before_synthesis is not None:
            await before_synthesis()
        started = time.perf_counter()
        pcm = await self._synthesize(text)
        synthesised = time.perf_counter() - started
        if not self._spoken and self._on_first_audio is not None:
            self._on_first_audio(time.perf_counter() - self._started, text)
        self._spoken += 1
        return SpokenClause(text=text, pcm=pcm, synthesised_s=synthesised)

    def cancel(self) -> None:
        """Stop the model writing (the caller barged in, or the reply is dropped)."""
        self._clauses.cancel()

    async def aclose(self) -> None:
        """Stop the model writing and wait until its stream is closed."""
        await self._clauses.aclose()
