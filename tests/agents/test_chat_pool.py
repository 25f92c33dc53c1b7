"""Calls that ask at once are written at once: several LLM servers behind one ChatPool.

The dispatch is tested on in-process members that stream until told to finish; the
embedded llama.cpp server itself, on the bundled model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from agents.assets import ModelCache
from agents.cascade.llm import (
    ChatPool,
    ChatSession,
    Message,
    OpenAIChat,
    Tool,
    ToolCall,
)
from agents.cascade.llm_server import EmbeddedLlamaServer
from app.settings import Settings

SYSTEM: Message = {"role": "system", "content": "You answer the phone."}


def asking(question: str, *history: Message) -> list[Message]:
    return [SYSTEM, *history, {"role": "user", "content": question}]


class HeldChat:
    """A member whose replies stream one word, then wait for `finish`."""

    def __init__(self, name: str) -> None:
        self.model = name
        self.asked: list[list[Message]] = []
        self.finish = asyncio.Event()
        self.offers_tools = False

    async def stream(self, messages: Sequence[Message]) -> AsyncIterator[str]:
        self.asked.append(list(messages))
        yield f"{self.model} "
        await self.finish.wait()
        yield "done."

    async def stream_tools(
        self, messages: Sequence[Message], tools: Sequence[Tool]
    ) -> AsyncIterator[str | ToolCall]:
        async for delta in self.stream(messages):
            yield delta

    async def aclose(self) -> None:
        pass


async def first_word(pool: ChatPool, messages: list[Message]) -> tuple[str, AsyncIterator[str]]:
    stream = pool.stream(messages)
    return (await anext(stream)).strip(), stream


async def test_replies_asked_for_at_once_go_to_different_servers() -> None:
    members = [HeldChat("a"), HeldChat("b"), HeldChat("c")]
    pool = ChatPool(members)
    first = [await first_word(pool, asking(q)) for q in ("Parking?", "Hours?", "Menu?")]
    assert [name for name, _ in first] == ["a", "b", "c"]
    assert pool.busy() == [1, 1, 1]
    for member in members:
        member.finish.set()
    for _, stream in first:
        assert [delta async for delta in stream] == ["done."]
    assert pool.busy() == [0, 0, 0]


async def test_a_lone_reply_goes_to_the_first_server() -> None:
    members = [HeldChat("a"), HeldChat("b")]
    for member in members:
        member.finish.set()
    pool = ChatPool(members)
    for question in ("Parking?", "Hours?", "Menu?"):
        words = [delta async for delta in pool.stream(asking(question))]
        assert words[0].strip() == "a"
    assert len(members[1].asked) == 0


async def test_a_busy_call_goes_back_to_the_server_holding_its_conversation() -> None:
    members = [HeldChat("a"), HeldChat("b"), HeldChat("c")]
    pool = ChatPool(members)
    earlier = [await first_word(pool, asking(q)) for q in ("Parking?", "Hours?", "Menu?")]
    members[1].finish.set()
    members[2].finish.set()
    for _, stream in earlier[1:]:
        _ = [delta async for delta in stream]
    # "a" still writes; the caller who asked "Menu?" on "c" goes on, and "c" has their
    # conversation in its prompt cache.
    history = [
        {"role": "user", "content": "Menu?"},
        {"role": "assistant", "content": "c done."},
    ]
    name, stream = await first_word(pool, asking("And desserts?", *history))
    assert name == "c"
    _ = [delta async for delta in stream]


async def test_each_call_keeps_to_a_server_of_its_own() -> None:
    members = [HeldChat("a"), HeldChat("b"), HeldChat("c")]
    for member in members:
        member.finish.set()
    pool = ChatPool(members)
    first, second = pool.session(), pool.session()

    async def heard(session: ChatSession, question: str) -> str:
        return "".join([delta async for delta in session.stream(asking(question))])

    # The same words from both callers (scripted calls): each stays on its own server.
    for _ in range(3):
        assert (await heard(first, "Parking?")).startswith("a")
        assert (await heard(second, "Parking?")).startswith("b")
    first.close()
    third = pool.session()  # the first caller hung up: their server is free for the next
    assert (await heard(third, "Hours?")).startswith("a")


async def test_the_servers_local_workers_write_on_are_the_calls_last_choice() -> None:
    # `serve --local-workers` points each worker at one of the first servers, which the
    # pool cannot see busy: calls there drafted and held the workers' replies back.
    members = [HeldChat("a"), HeldChat("b"), HeldChat("c"), HeldChat("d")]
    for member in members:
        member.finish.set()
    pool = ChatPool(members, shared=2)
    sessions = [pool.session() for _ in range(4)]
    assert [session.home for session in sessions] == [2, 3, 0, 1]
    for session in sessions[2:]:
        session.close()
    words = [delta async for delta in pool.stream(asking("Parking?"))]
    assert words[0].strip() == "c", "a reply outside any call goes to an idle own server"
    for session in sessions[:2]:
        session.close()


def test_a_pool_cannot_share_more_members_than_it_has() -> None:
    with pytest.raises(ValueError, match="3 shared members of a pool of 2"):
        ChatPool([HeldChat("a"), HeldChat("b")], shared=3)


async def test_a_call_whose_server_is_busy_is_answered_by_another() -> None:
    members = [HeldChat("a"), HeldChat("b")]
    pool = ChatPool(members)
    caller, other = pool.session(), pool.session()
    _, writing = await first_word(pool, asking("Menu?"))  # a reply outside any call, on "a"
    stream = caller.stream(asking("Parking?"))
    assert (await anext(stream)).strip() == "b"
    assert pool.busy() == [1, 1]
    for member in members:
        member.finish.set()
    _ = [delta async for delta in stream] + [delta async for delta in writing]
    other.close()
    caller.close()


async def test_a_reply_abandoned_midway_frees_its_server() -> None:
    members = [HeldChat("a"), HeldChat("b")]
    pool = ChatPool(members)
    _, stream = await first_word(pool, asking("Parking?"))
    assert pool.busy() == [1, 0]
    await stream.aclose()  # the caller hung up, or barged in
    assert pool.busy() == [0, 0]


@pytest.fixture(scope="module")
def smollm() -> ModelCache:
    return ModelCache(Settings.from_env({}).model_cache_dir)


@pytest.mark.slow  # a real llama.cpp server
async def test_a_server_asked_twice_at_once_finishes_both_replies(smollm: ModelCache) -> None:
    # llama_cpp.server's default ends a streaming reply once another request waits: the
    # first caller's answer stopped after the words it had (often none).
    server = EmbeddedLlamaServer(smollm.path("smollm2-135m-instruct"), threads=1)
    await server.start()
    chat = OpenAIChat(base_url=server.base_url, model=server.model_name, max_tokens=40)
    try:

        async def reply(question: str) -> str:
            return "".join([delta async for delta in chat.stream(asking(question))])

        replies = await asyncio.gather(
            reply("Tell me about your opening hours."), reply("Where can I park near you?")
        )
    finally:
        await chat.aclose()
        await server.stop()
    assert all(len(text.split()) >= 5 for text in replies), replies
