"""The LLM ends and transfers calls with tools: an OpenAI-compatible fake LLM server
(tests/fake_llm.py) that answers with tool calls, the real server and models otherwise,
the Twilio-protocol caller, and the fake Twilio REST API for the transfer.

A tool call is acted on and never spoken; an endpoint that refuses tools (LLM_TOOLS=auto)
is asked again without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from agents.cascade.agent import DEFAULT_FAREWELL, CascadeModels
from agents.cascade.llm import OpenAIChat, ToolsMode
from callevents import ToolCalled
from ops.local_server import ServerThread
from ops.simulate import CallerTurn
from telephony.twiml import dial_twiml
from tests.conftest import AUTH_TOKEN, GREETING, ONE_REPLY_GAP_MS, Bot, place_call, start_bot
from tests.fake_llm import MODEL, CallTool, FakeLlm, Say, WriteTool
from tests.fake_twilio import FakeTwilio
from tests.test_call_control_calls import bot_lines, new_sid, record_of, timeline

pytestmark = pytest.mark.timeout(240)

TOOLS = ["end_call", "transfer_call"]
DONE = CallerTurn(text="That is all I needed today.")


@pytest.fixture
def llm(servers: ServerThread) -> Iterator[FakeLlm]:
    fake = FakeLlm()
    fake.serve(servers)
    yield fake


@pytest.fixture
def twilio(servers: ServerThread) -> Iterator[FakeTwilio]:
    fake = FakeTwilio(AUTH_TOKEN)
    fake.serve(servers)
    yield fake


def tools_bot(
    servers: ServerThread,
    models: CascadeModels,
    llm: FakeLlm,
    mode: ToolsMode = "on",
    **overrides: object,
) -> Bot:
    """The real models, with the LLM replaced by the fake endpoint."""

    async def connect() -> OpenAIChat:  # on the servers' loop, where it will be used
        return OpenAIChat(base_url=llm.url, model=MODEL, tools=mode)

    chat = servers.run(connect())
    servers.stack.push_async_callback(chat.aclose)
    with_fake = dataclasses.replace(models, llm=chat)
    return start_bot(servers, with_fake, twilio_auth_token=AUTH_TOKEN, **overrides)


async def test_the_llm_ends_the_call_with_a_tool_and_the_call_is_never_spoken(
    servers: ServerThread, models: CascadeModels, llm: FakeLlm
) -> None:
    llm.replies = [CallTool("end_call", arguments='{"reason": "done"}')]
    bot = tools_bot(servers, models, llm)

    report = await place_call(bot, DONE, hangup_after_ms=10000)

    assert llm.offered_tools() == [TOOLS]
    assert await bot_lines(bot, report) == [GREETING, DEFAULT_FAREWELL]
    assert len(report.bot_spans(ONE_REPLY_GAP_MS)) == 2, "the caller heard the greeting and goodbye"
    assert report.server_closed
    meta = await record_of(bot, report.call_sid)
    assert (meta["ended_with"], meta["end_reason"]) == ("bot_hangup", "llm")
    called = [e for e in timeline(bot, report.call_sid) if isinstance(e, ToolCalled)]
    assert [(e.tool, e.arguments) for e in called] == [("end_call", '{"reason": "done"}')]


async def test_a_tool_call_written_out_as_text_is_not_spoken(
    servers: ServerThread, models: CascadeModels, llm: FakeLlm
) -> None:
    llm.replies = [WriteTool("end_call")]
    bot = tools_bot(servers, models, llm)

    report = await place_call(bot, DONE, hangup_after_ms=10000)

    assert await bot_lines(bot, report) == [GREETING, DEFAULT_FAREWELL]
    assert len(report.bot_spans(ONE_REPLY_GAP_MS)) == 2
    assert report.server_closed


async def test_the_llm_transfers_the_call_with_a_tool(
    servers: ServerThread, models: CascadeModels, llm: FakeLlm, twilio: FakeTwilio
) -> None:
    target = "+15557654321"
    llm.replies = [CallTool("transfer_call")]
    bot = tools_bot(
        servers,
        models,
        llm,
        transfer_to=target,
        twilio_account_sid=twilio.account_sid,
        twilio_api_url=twilio.url,
    )
    sid = new_sid()
    twilio.add_live_call(sid)

    # The caller's words alone would not transfer: with tools, the LLM decides.
    report = await place_call(
        bot,
        CallerTurn(text="My card was charged twice."),
        hangup_after_ms=10000,
        call_sid=sid,
        account_sid=twilio.account_sid,
    )

    [update] = twilio.updates(sid)
    assert update.form == {"Twiml": [dial_twiml(target)]}
    assert "transfer_call" not in " ".join(await bot_lines(bot, report))
    meta = await record_of(bot, sid)
    assert (meta["ended_with"], meta["end_reason"]) == ("transferred", "llm")


async def test_with_auto_an_endpoint_that_refuses_tools_is_asked_again_without(
    servers: ServerThread, models: CascadeModels, llm: FakeLlm
) -> None:
    llm.replies = [Say("We open at nine in the morning.")]
    llm.refuse_tools = True
    bot = tools_bot(servers, models, llm, mode="auto")

    report = await place_call(bot, CallerTurn(text="When do you open?"), hangup_after_ms=3000)

    assert llm.offered_tools() == [TOOLS, []]
    assert (await bot_lines(bot, report))[-1] == "We open at nine in the morning."
    assert not report.server_closed
