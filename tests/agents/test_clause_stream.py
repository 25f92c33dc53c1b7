"""A reply written in the background and taken a clause at a time: what both the cascade's
reply writer and the duplex cascade backend speak from."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agents.cascade.clause_stream import ClauseStream
from agents.cascade.llm import ToolCall
from agents.errors import LanguageModelError
from tests.agents.models import writing


async def _all(stream: ClauseStream) -> list[str]:
    return [clause async for clause in _clauses(stream)]


async def _clauses(stream: ClauseStream) -> AsyncIterator[str]:
    while (clause := await stream.next_clause()) is not None:
        yield clause


async def test_a_clause_is_taken_while_the_model_is_still_writing() -> None:
    more = asyncio.Event()
    async with ClauseStream(writing("We open at nine, ", "and close at five.", then=more)) as s:
        assert await asyncio.wait_for(s.next_clause(), 1) == "We open at nine,"
        assert not s.over
        more.set()
        assert await _all(s) == ["and close at five."]
        assert s.over and s.completed


async def test_a_tool_call_ends_the_reply_and_nothing_after_it_is_spoken() -> None:
    hang_up = ToolCall(name="end_call", arguments="{}")
    async with ClauseStream(writing("Goodbye now. ", hang_up, "Never said.")) as stream:
        assert await _all(stream) == ["Goodbye now."]
        assert stream.tool_call == hang_up


async def test_a_failing_model_still_gets_its_written_clauses_said_first() -> None:
    written = writing("The shop is open from nine in the morning. ", "And on", fail=True)
    async with ClauseStream(written) as stream:
        assert await stream.next_clause() == "The shop is open from nine in the morning."
        with pytest.raises(LanguageModelError):
            await stream.next_clause()
        assert not stream.completed


async def test_a_slow_model_times_out_the_wait_but_its_clause_still_comes() -> None:
    more = asyncio.Event()
    async with ClauseStream(writing(then=more)) as stream:
        with pytest.raises(TimeoutError):
            await stream.next_clause(within_s=0.01)
        with pytest.raises(TimeoutError):
            await stream.next_clause(within_s=0)  # no time left: no wait at all
        more.set()
        assert await stream.next_clause(within_s=1) is None
        assert stream.completed


async def test_closing_the_stream_closes_the_models_stream() -> None:
    closed: list[bool] = []
    forever = asyncio.Event()
    stream = ClauseStream(writing("Half a ", then=forever, closed=closed))
    await asyncio.sleep(0.01)
    await stream.aclose()
    assert closed == [True]
    assert not stream.completed
    assert await stream.next_clause() is None  # nothing more, and no error


async def test_an_empty_reply_is_over_without_a_clause() -> None:
    async with ClauseStream(writing("", "  ")) as stream:
        assert await stream.next_clause() is None
        assert stream.completed and stream.tool_call is None
