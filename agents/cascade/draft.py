"""A reply written while the turn engine waits out a pause that may end the caller's turn.

A turn the judge is unsure of is answered only after up to 1.8 s of quiet (the sentence
may go on). The words are known long before that: Whisper runs at the pause's start. So
the LLM starts on them at once, and its first clause is synthesised (into the speaker's
cache); if the turn ends with those same words, the reply starts from what is already
written, and the wait is no longer followed by the LLM's and the TTS's. If the caller
goes on, the draft is thrown away (and llama.cpp keeps the prompt's prefix in its cache,
so even a long reading's final prompt is mostly prefilled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from agents.cascade.clauses import ClauseSplitter
from agents.cascade.llm import Message, ToolCall
from agents.errors import BackendError

log = logging.getLogger(__name__)

Item = str | ToolCall


class DraftBoard:
    """The drafts being written across all calls. An embedded llama.cpp server writes one
    reply at a time and cannot stop a prompt's prefill, so a draft must never hold a
    server another call's reply needs: drafts are written only while every call served
    has a server of its own (the embedded default starts one per MAX_CALLS), and should a
    call come in that must share, any reply starting stops them all.

    With one shared server, 4 calls ending their turns at once (bench turns --calls 4
    --only pauses) gave mouth to mouth p50 / p90 1.4 / 2.3 s without drafts, 1.7 / 2.6 s
    with drafts that did not give way and 1.4 / 3.2 s with drafts cancelled by replies.
    With a server per call a draft costs the others CPU only: 1.05 / 1.57 s with drafts
    against 1.37 / 1.68 s without (the drafted replies' first clause was ready, or nearly,
    when the pause ended)."""

    def __init__(self, servers: int = 1) -> None:
        # 0: no server is this process's alone (local workers write on the only one).
        if servers < 0:
            raise ValueError(f"servers must be >= 0, got {servers}")
        self.servers = servers
        self._drafts: set[asyncio.Task[None]] = set()
        self._calls = 0

    def _shared(self) -> bool:
        return self._calls > self.servers  # with 0 servers, any call shares

    def may_draft(self) -> bool:
        return not self._shared()

    def call_started(self) -> None:
        self._calls += 1

    def call_ended(self) -> None:
        self._calls -= 1

    def drafting(self, task: asyncio.Task[None]) -> None:
        self._drafts.add(task)
        task.add_done_callback(self._drafts.discard)

    def taken(self, task: asyncio.Task[None]) -> None:
        """A draft became its call's reply: it is no longer a draft."""
        self._drafts.discard(task)

    def reply_started(self) -> None:
        if not self._shared():
            return  # every draft holds its own call's server
        for task in list(self._drafts):
            task.cancel()
        self._drafts.clear()


class ReplyDraft:
    """The LLM's stream for `messages`, buffered from the start, to be followed later."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = [dict(message) for message in messages]
        self._items: list[Item] = []
        self._finished = False
        self._error: BackendError | None = None
        self._stopped = False  # cancelled before it finished: it holds part of a reply
        self._grown = asyncio.Event()

    def fits(self, messages: Sequence[Message]) -> bool:
        """Written, or being written, for exactly these messages (the same history and the
        same words)."""
        return not self._stopped and self.messages == [dict(message) for message in messages]

    async def write(
        self,
        stream: AsyncIterator[Item],
        synthesize: Callable[[str], Awaitable[object]],
    ) -> None:
        """Run as a task: buffer the stream, and synthesise the first clause once it is
        written. A failure is kept for whoever follows the draft, never raised here: a
        draft nobody uses must not end the call."""
        splitter: ClauseSplitter | None = ClauseSplitter()
        try:
            async for item in stream:
                self._items.append(item)
                self._grown.set()
                if splitter is not None and isinstance(item, str):
                    if clauses := splitter.feed(item):
                        splitter = None
                        await self._warm(synthesize, clauses[0])
        except BackendError as exc:
            self._error = exc
            log.debug("a drafted reply failed: %s", exc)
        except asyncio.CancelledError:
            self._stopped = True
            raise
        finally:
            self._finished = True
            self._grown.set()

    @staticmethod
    async def _warm(synthesize: Callable[[str], Awaitable[object]], clause: str) -> None:
        try:
            await synthesize(clause)
        except BackendError as exc:  # the reply itself will meet it, and report it
            log.debug("could not synthesise a drafted clause: %s", exc)

    async def items(self) -> AsyncIterator[Item]:
        """What was written so far, then the rest as it comes; the draft's failure, if any."""
        sent = 0
        while True:
            while sent < len(self._items):
                sent += 1
                yield self._items[sent - 1]
            if self._finished:
                break
            self._grown.clear()
            await self._grown.wait()
        if self._error is not None:
            raise self._error
