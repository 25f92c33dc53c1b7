"""A reply on its way to the caller: clauses synthesised in order, timed once, and a reply
with nothing to say treated as a failed one. What the cascade's reply writer plays and
the duplex cascade backend hands out by units."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing

import numpy as np
import pytest

from agents.cascade.llm import ToolCall
from agents.cascade.spoken_reply import SpokenReply
from agents.errors import LanguageModelError
from tests.agents.models import writing


class Voice:
    """Synthesises a clause as one sample per character, and keeps what it was asked."""

    def __init__(self) -> None:
        self.said: list[str] = []

    async def __call__(self, text: str) -> np.ndarray:
        self.said.append(text)
        return np.zeros(len(text), dtype=np.float32)


async def _texts(reply: SpokenReply) -> list[str]:
    texts = []
    while (clause := await reply.next()) is not None:
        texts.append(clause.text)
    return texts


async def test_clauses_come_synthesised_in_the_order_written() -> None:
    voice = Voice()
    async with aclosing(
        SpokenReply(writing("We open at nine, ", "and close at five."), voice, name="t")
    ) as r:
        first = await r.next()
        assert first is not None and first.text == "We open at nine,"
        assert first.pcm.size == len("We open at nine,")
        assert await _texts(r) == ["and close at five."]
        assert voice.said == ["We open at nine,", "and close at five."]
        assert r.over and r.said_anything


async def test_first_token_and_first_audio_are_each_told_once_from_the_start() -> None:
    tokens: list[float] = []
    audio: list[tuple[float, str]] = []
    started = time.perf_counter() - 0.5  # the reply was asked for half a second ago
    reply = SpokenReply(
        writing("Sure. ", "It is noon."),
        Voice(),
        name="t",
        started=started,
        on_first_token=tokens.append,
        on_first_audio=lambda elapsed, text: audio.append((elapsed, text)),
    )
    async with aclosing(reply):
        assert await _texts(reply) == ["Sure.", "It is noon."]
    assert len(tokens) == 1 and tokens[0] >= 0.5
    assert len(audio) == 1 and audio[0][1] == "Sure." and audio[0][0] >= tokens[0]


async def test_a_tool_call_before_any_words_is_the_reply_not_a_failure() -> None:
    tokens: list[float] = []
    hang_up = ToolCall(name="end_call", arguments="{}")
    reply = SpokenReply(writing(hang_up), Voice(), name="t", on_first_token=tokens.append)
    async with aclosing(reply):
        assert await reply.next() is None
        assert reply.tool_call == hang_up and not reply.said_anything
    assert tokens == []  # a tool call is not the reply's first words


async def test_a_reply_with_nothing_to_say_is_a_failed_reply() -> None:
    async with aclosing(SpokenReply(writing("**", " "), Voice(), name="t")) as reply:
        with pytest.raises(LanguageModelError, match="nothing to say"):
            await reply.next()


async def test_a_model_failure_comes_after_the_clauses_written_before_it() -> None:
    voice = Voice()
    written = writing("The shop is open from nine in the morning. ", "And on", fail=True)
    async with aclosing(SpokenReply(written, voice, name="t")) as r:
        assert (await r.next()) is not None
        with pytest.raises(LanguageModelError, match="went away"):
            await r.next()
    assert voice.said == ["The shop is open from nine in the morning."]


async def test_a_wait_past_its_limit_loses_no_clause() -> None:
    more = asyncio.Event()
    async with aclosing(SpokenReply(writing(then=more), Voice(), name="t")) as reply:
        with pytest.raises(TimeoutError):
            await reply.next(within_s=0.05)
        more.set()
    reply = SpokenReply(writing("Sure. ", then=more), Voice(), name="t")
    more.clear()
    async with aclosing(reply):
        first = await reply.next()
        assert first is not None and first.text == "Sure."
        with pytest.raises(TimeoutError):
            await reply.next(within_s=0.05)
        more.set()
        assert await reply.next() is None


async def test_synthesis_waits_for_what_must_come_before_it() -> None:
    """The reply writer holds a clause's synthesis while the caller holds the bot."""
    voice = Voice()
    unheld = asyncio.Event()
    async with aclosing(SpokenReply(writing("Sure."), voice, name="t")) as reply:
        taking = asyncio.create_task(reply.next(before_synthesis=unheld.wait))
        await asyncio.sleep(0.05)
        assert not taking.done() and voice.said == []
        unheld.set()
        clause = await asyncio.wait_for(taking, 1)
        assert clause is not None and voice.said == ["Sure."]


async def test_cancel_stops_the_model_writing() -> None:
    more = asyncio.Event()
    reply = SpokenReply(writing("Sure. ", then=more), Voice(), name="t")
    assert (await reply.next()) is not None
    reply.cancel()
    await reply.aclose()
    assert await reply.next() is None  # cancelled: over, and not a reply with nothing to say
