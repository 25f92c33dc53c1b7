"""The language model: any OpenAI-compatible endpoint, streamed.

With no endpoint configured, `EmbeddedLlamaServer` (agents.cascade.llm_server) runs
`llama_cpp.server` on 127.0.0.1 over the bundled GGUF, and the same client talks to it:
one code path for a hosted model and the local one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast, runtime_checkable

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from agents.errors import LanguageModelError, LanguageModelUnreachable

if TYPE_CHECKING:
    from agents.cascade.llm_health import LlmHealth

log = logging.getLogger(__name__)

Message = dict[str, str]


class ChatModel(Protocol):
    def stream(self, messages: Sequence[Message]) -> AsyncIterator[str]:
        """Text deltas of the reply. Raises LanguageModelError."""
        ...


ToolsMode = Literal["auto", "on", "off"]
Tool = dict[str, Any]  # an OpenAI-style tool: {"type": "function", "function": {...}}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The model called a tool instead of (or after) speaking."""

    name: str
    arguments: str = ""  # JSON text, as the model wrote it


@runtime_checkable
class ToolChat(Protocol):
    """A chat model that may be offered tools (OpenAI-style function calling)."""

    @property
    def offers_tools(self) -> bool:
        """Tools are on for this endpoint (LLM_TOOLS, and the endpoint has not refused)."""
        ...

    def stream_tools(
        self, messages: Sequence[Message], tools: Sequence[Tool]
    ) -> AsyncIterator[str | ToolCall]:
        """Text deltas, then at most one ToolCall per tool the model called."""
        ...


# Small models that do not do function calling write the call out as text. Such text
# must not be spoken: a reply that starts like one is held back until it is complete.
_TOOLISH_START = ("{", "[", "<tool", "```")


class OpenAIChat:
    """Streams chat completions through the `openai` client."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        max_tokens: int = 80,
        temperature: float = 0.3,
        first_token_timeout_s: float = 8.0,
        tools: ToolsMode = "off",
    ) -> None:
        self.model = model
        self._tools_mode = tools
        self._tools_refused = False
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._first_token_timeout = first_token_timeout_s
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            max_retries=0,  # a retry costs the caller seconds of silence: fail fast, apologise
            # openai's own Timeout: its HTTP client is not necessarily the httpx we use.
            timeout=openai.Timeout(30.0, connect=3.0),
        )

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    @property
    def api_key(self) -> str:
        return self._client.api_key

    async def stream(self, messages: Sequence[Message]) -> AsyncIterator[str]:
        try:
            async with asyncio.timeout(self._first_token_timeout):
                response = await self._client.chat.completions.create(
                    model=self.model,
                    # Our messages are plain {role, content} dicts, which openai takes.
                    messages=cast("list[ChatCompletionMessageParam]", list(messages)),
                    max_tokens=self._max_tokens,
                    temperature=self._temperature,
                    stream=True,
                )
            async with response:
                async for chunk in response:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta.content
                    if delta:
                        yield delta
        except TimeoutError as exc:
            raise LanguageModelError(
                f"no reply from {self.model} within {self._first_token_timeout:.1f} s"
            ) from exc
        except (openai.OpenAIError, httpx.TransportError) as exc:
            raise _model_error(exc) from exc

    @property
    def offers_tools(self) -> bool:
        return self._tools_mode == "on" or (self._tools_mode == "auto" and not self._tools_refused)

    async def stream_tools(
        self, messages: Sequence[Message], tools: Sequence[Tool]
    ) -> AsyncIterator[str | ToolCall]:
        """Like `stream`, with `tools` offered. With LLM_TOOLS=auto, an endpoint that
        rejects the request (HTTP 4xx naming tools) is asked again without them, and
        never offered tools again by this process."""
        if not self.offers_tools:
            async for delta in self.stream(messages):
                yield delta
            return
        try:
            async for item in self._stream_tools(messages, tools):
                yield item
        except _ToolsRefused as exc:
            if self._tools_mode == "on":
                raise LanguageModelError(f"{self.model} refused tools: {exc}") from exc
            self._tools_refused = True
            log.warning("LLM endpoint refused tool calls (%s); going on without tools", exc)
            async for delta in self.stream(messages):
                yield delta

    async def _stream_tools(
        self, messages: Sequence[Message], tools: Sequence[Tool]
    ) -> AsyncIterator[str | ToolCall]:
        calls: dict[int, list[str]] = {}  # index -> [name, arguments so far]
        held: list[str] = []  # content that may be a tool call written out as text
        judged = False
        try:
            async with asyncio.timeout(self._first_token_timeout):
                response = await self._client.chat.completions.create(
                    model=self.model,
                    messages=cast("list[ChatCompletionMessageParam]", list(messages)),
                    tools=cast("list[ChatCompletionToolParam]", list(tools)),
                    max_tokens=self._max_tokens,
                    temperature=self._temperature,
                    stream=True,
                )
            async with response:
                async for chunk in response:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    for call in delta.tool_calls or ():
                        entry = calls.setdefault(call.index, ["", ""])
                        if call.function is not None:
                            entry[0] += call.function.name or ""
                            entry[1] += call.function.arguments or ""
                    text = delta.content
                    if not text:
                        continue
                    if judged and not held:
                        yield text
                        continue
                    held.append(text)
                    start = "".join(held).lstrip()
                    if not start:
                        continue
                    if not judged:
                        judged = True
                        if not start.startswith(_TOOLISH_START):
                            yield "".join(held)
                            held.clear()
        except TimeoutError as exc:
            raise LanguageModelError(
                f"no reply from {self.model} within {self._first_token_timeout:.1f} s"
            ) from exc
        except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
            if "tool" in str(exc).lower() or "function" in str(exc).lower():
                raise _ToolsRefused(str(exc)) from exc
            raise LanguageModelError(f"{type(exc).__name__}: {exc}") from exc
        except (openai.OpenAIError, httpx.TransportError) as exc:
            raise _model_error(exc) from exc
        names = {_tool_name(t) for t in tools}
        if held:
            # Text that looked like a tool call: one of ours is taken as the call, and
            # anything else is markup no caller should hear.
            written = "".join(held)
            for name in names:
                if name in written:
                    calls.setdefault(len(calls), [name, ""])
                    break
        for name, arguments in calls.values():
            if name in names:
                yield ToolCall(name=name, arguments=arguments)
            else:
                log.warning("LLM called an unknown tool %r; ignored", name[:40])

    async def aclose(self) -> None:
        await self._client.close()


# A pool streams text deltas, or (with tools) deltas and tool calls.
_Item = TypeVar("_Item", str, str | ToolCall)


def _model_error(exc: Exception) -> LanguageModelError:
    """What a client error means for the reply: a connection that could not be made or
    was dropped mid-reply (a dead server) may be asked again elsewhere; a timeout or a
    refusal may not."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        return LanguageModelError(text)
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return LanguageModelUnreachable(text)
    return LanguageModelError(text)


class PooledChat(ChatModel, ToolChat, Protocol):
    """What a ChatPool member is: an OpenAIChat, or anything streaming like one."""

    @property
    def model(self) -> str: ...

    async def aclose(self) -> None: ...


class ChatPool:
    """Several copies of one chat endpoint, serving as one: each reply goes to the copy
    writing the fewest replies; among those to the one that last wrote for the longest
    part of the same conversation (its prompt cache holds that prefix, which on one
    thread took seconds to evaluate again under load), else to the first (the embedded
    one with the most threads).

    The embedded llama.cpp server writes one reply at a time. With 4 calls ending their
    turns at once, the fourth caller's first clause waited for three whole replies
    (p90 2.1-2.3 s on 2 cores in `python -m benchmarks llm`); with a server per call, 1.1 s.

    `shared`: the first `shared` members also write for clients outside this pool
    (`serve --local-workers` points each worker at one), which the pool cannot see:
    calls home there last, and a reply goes there only when every other member is as
    busy (so a call that had to make its home there writes on the others while they
    are idle, at the cost of their prompt caches: only when there are more calls than
    servers).
    """

    def __init__(
        self,
        members: Sequence[PooledChat],
        *,
        shared: int = 0,
        health: LlmHealth | None = None,
        wait_s: float = 10.0,
    ) -> None:
        if not members:
            raise ValueError("a chat pool needs at least one member")
        if not 0 <= shared <= len(members):
            raise ValueError(f"{shared} shared members of a pool of {len(members)}")
        self.members = list(members)
        # Which members can answer (a dead embedded server is being restarted); None:
        # every member always can.
        self.health = health
        # How long a reply waits for some member to come back before it fails.
        self.wait_s = wait_s
        self._active = [0] * len(members)
        self._last: list[list[Message]] = [[] for _ in members]
        self._homes = [0] * len(members)  # calls whose conversation each member keeps
        self._outside = [1 if index < shared else 0 for index in range(len(members))]

    def session(self) -> ChatSession:
        """A call's own view of the pool: its replies go to one member (its home) while
        it is free, so the conversation stays in that member's prompt cache. Without a
        home, 4 calls wandered between members and a one-thread server evaluating a
        conversation of 9 messages again took 3.3-5.7 s under load. `close` at hang-up."""
        home = min(
            range(len(self.members)),
            key=lambda index: (self._homes[index] + self._outside[index], index),
        )
        self._homes[home] += 1
        return ChatSession(self, home)

    def _leave(self, home: int) -> None:
        self._homes[home] -= 1

    @property
    def model(self) -> str:
        return self.members[0].model

    @property
    def offers_tools(self) -> bool:
        return self.members[0].offers_tools

    def busy(self) -> list[int]:
        """Replies being written by each member, in order."""
        return list(self._active)

    def _alive(self, index: int) -> bool:
        return self.health is None or self.health.alive(index)

    def _lease(
        self, messages: Sequence[Message], home: int | None = None, failed: int | None = None
    ) -> int:
        def preference(index: int) -> tuple[bool, bool, int, bool, int, bool, int]:
            shared = _shared_prefix(self._last[index], messages)
            busy = self._active[index] + self._outside[index]
            dead = not self._alive(index)
            return (dead, index == failed, busy, index != home, -shared, index != 0, index)

        index = min(range(len(self.members)), key=preference)
        log.debug(
            "reply %d messages long to LLM %d of %d (shares %d with its last; busy %s)",
            len(messages),
            index,
            len(self.members),
            _shared_prefix(self._last[index], messages),
            self._active,
        )
        self._active[index] += 1
        self._last[index] = [dict(message) for message in messages]
        return index

    async def _serve(
        self,
        ask: Callable[[PooledChat], AsyncIterator[_Item]],
        messages: Sequence[Message],
        home: int | None,
    ) -> AsyncIterator[_Item]:
        """A reply from a live member. One that cannot be reached before it said
        anything (its server died under us) is asked of a live member, or of the
        restarted one, once: a caller hears the apology only if that fails too."""
        failed: int | None = None
        for attempt in (1, 2):
            if self.health is not None and not await self.health.wait_alive(self.wait_s):
                raise LanguageModelUnreachable(
                    f"no LLM answers ({self.health.reason or 'all down'}); "
                    f"waited {self.wait_s:.0f} s"
                )
            index = self._lease(messages, home, failed)
            said = False
            try:
                async for item in ask(self.members[index]):
                    said = True
                    yield item
                return
            except LanguageModelUnreachable as exc:
                if said or attempt == 2:
                    raise
                failed = index
                if self.health is not None:
                    self.health.unreachable(index, str(exc))
                log.warning("LLM %d unreachable (%s); asking again", index, exc)
            finally:
                self._active[index] -= 1

    def stream(self, messages: Sequence[Message], *, home: int | None = None) -> AsyncIterator[str]:
        return self._serve(lambda member: member.stream(messages), messages, home)

    def stream_tools(
        self, messages: Sequence[Message], tools: Sequence[Tool], *, home: int | None = None
    ) -> AsyncIterator[str | ToolCall]:
        return self._serve(lambda member: member.stream_tools(messages, tools), messages, home)

    async def aclose(self) -> None:
        for member in self.members:
            await member.aclose()


class ChatSession:
    """One call's replies through a ChatPool, kept on the call's home member."""

    def __init__(self, pool: ChatPool, home: int) -> None:
        self.pool = pool
        self.home = home
        self._open = True

    @property
    def offers_tools(self) -> bool:
        return self.pool.offers_tools

    def stream(self, messages: Sequence[Message]) -> AsyncIterator[str]:
        return self.pool.stream(messages, home=self.home)

    def stream_tools(
        self, messages: Sequence[Message], tools: Sequence[Tool]
    ) -> AsyncIterator[str | ToolCall]:
        return self.pool.stream_tools(messages, tools, home=self.home)

    def close(self) -> None:
        if self._open:
            self._open = False
            self.pool._leave(self.home)


def _shared_prefix(before: Sequence[Message], now: Sequence[Message]) -> int:
    """How many leading messages two prompts have in common."""
    shared = 0
    for old, new in zip(before, now, strict=False):
        if old != new:
            break
        shared += 1
    return shared


class _ToolsRefused(Exception):
    """The endpoint rejected a request because it offered tools."""


def _tool_name(tool: Tool) -> str:
    function = tool.get("function")
    return str(function.get("name", "")) if isinstance(function, dict) else ""
