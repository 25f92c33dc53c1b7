"""OpenAIChat with tools, against an OpenAI-compatible fake server streaming tool calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents.cascade.llm import OpenAIChat, ToolCall, ToolsMode
from agents.control import CALL_TOOLS
from agents.errors import LanguageModelError
from ops.local_server import ServerThread
from tests.fake_llm import MODEL, CallTool, FakeLlm, Reply, Say, WriteTool

MESSAGES = [{"role": "user", "content": "That's all, thanks."}]


@pytest.fixture
def llm(servers: ServerThread) -> Iterator[FakeLlm]:
    fake = FakeLlm()
    fake.serve(servers)
    yield fake


async def reply(llm: FakeLlm, answer: Reply, mode: ToolsMode = "on") -> list[str | ToolCall]:
    llm.replies = [answer]
    chat = OpenAIChat(base_url=llm.url, model=MODEL, tools=mode)
    try:
        return [item async for item in chat.stream_tools(MESSAGES, CALL_TOOLS)]
    finally:
        await chat.aclose()


async def test_a_tool_call_comes_whole_after_the_words_before_it(llm: FakeLlm) -> None:
    items = await reply(llm, CallTool("end_call", '{"why": "done"}', text="Goodbye then."))

    assert items == ["Goodbye then.", ToolCall("end_call", '{"why": "done"}')]
    assert llm.offered_tools() == [["end_call", "transfer_call"]]


async def test_a_tool_the_call_does_not_have_is_ignored(llm: FakeLlm) -> None:
    assert await reply(llm, CallTool("delete_account")) == []


async def test_a_tool_call_written_as_text_is_a_call_not_words(llm: FakeLlm) -> None:
    assert await reply(llm, WriteTool("transfer_call")) == [ToolCall("transfer_call")]


async def test_plain_words_stream_as_words(llm: FakeLlm) -> None:
    items = await reply(llm, Say("We open at nine."))

    assert "".join(str(i) for i in items).strip() == "We open at nine."


async def test_with_tools_off_none_are_offered(llm: FakeLlm) -> None:
    await reply(llm, Say("Sure."), mode="off")

    assert llm.offered_tools() == [[]]


async def test_with_tools_on_an_endpoint_refusing_them_is_a_failed_reply(llm: FakeLlm) -> None:
    llm.refuse_tools = True

    with pytest.raises(LanguageModelError, match="refused tools"):
        await reply(llm, Say("Sure."), mode="on")
