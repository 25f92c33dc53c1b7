"""Replies drafted while a pause is waited out, and how they give way to actual replies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agents.cascade.draft import DraftBoard, ReplyDraft
from agents.cascade.llm import ToolCall
from agents.errors import LanguageModelError

MESSAGES = [{"role": "system", "content": "persona"}, {"role": "user", "content": "Hi."}]


async def _stream(*items: str, then: asyncio.Event | None = None) -> AsyncIterator[str | ToolCall]:
    for item in items:
        yield item
    if then is not None:
        await then.wait()


async def _nothing(text: str) -> None:
    return None


async def _follow(draft: ReplyDraft) -> list[str | ToolCall]:
    return [item async for item in draft.items()]


async def test_a_draft_replays_what_was_written_then_follows_the_rest() -> None:
    more = asyncio.Event()
    draft = ReplyDraft(MESSAGES)
    writer = asyncio.create_task(draft.write(_stream("Sure, ", "we open ", then=more), _nothing))
    await asyncio.sleep(0)
    follower = asyncio.create_task(_follow(draft))
    await asyncio.sleep(0)
    assert not follower.done(), "the stream is still open"
    more.set()
    await writer
    assert await follower == ["Sure, ", "we open "]


async def test_the_first_clause_is_synthesised_while_drafting() -> None:
    said: list[str] = []

    async def synthesize(text: str) -> None:
        said.append(text)

    draft = ReplyDraft(MESSAGES)
    await draft.write(_stream("Of course, ", "we open at nine. ", "Bye."), synthesize)
    assert said == ["Of course,"], "only the first clause: the reply synthesises the rest"


async def test_a_drafts_failure_is_raised_to_its_follower_not_to_its_writer() -> None:
    async def failing() -> AsyncIterator[str | ToolCall]:
        yield "Sure"
        raise LanguageModelError("the model server went away")

    draft = ReplyDraft(MESSAGES)
    await draft.write(failing(), _nothing)  # does not raise
    with pytest.raises(LanguageModelError):
        await _follow(draft)


async def test_a_draft_fits_only_the_same_messages_and_not_once_stopped() -> None:
    draft = ReplyDraft(MESSAGES)
    assert draft.fits([dict(m) for m in MESSAGES])
    assert not draft.fits([*MESSAGES[:1], {"role": "user", "content": "Hi. And more."}])
    writer = asyncio.create_task(draft.write(_stream("Sure", then=asyncio.Event()), _nothing))
    await asyncio.sleep(0)
    writer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writer
    assert not draft.fits(MESSAGES), "a stopped draft holds only part of a reply"


async def test_once_calls_share_a_server_any_reply_starting_stops_every_draft() -> None:
    board = DraftBoard(servers=1)
    board.call_started()
    drafts = [
        asyncio.create_task(ReplyDraft(MESSAGES).write(_stream(then=asyncio.Event()), _nothing))
        for _ in range(2)
    ]
    for task in drafts:
        board.drafting(task)
    board.call_started()  # a second call: it shares the one server
    assert not board.may_draft(), "a second call's replies must not wait for a draft"
    board.reply_started()
    await asyncio.sleep(0)
    assert all(task.cancelled() for task in drafts)


async def test_with_a_server_per_call_replies_leave_other_calls_drafts_alone() -> None:
    board = DraftBoard(servers=4)
    for _ in range(4):
        board.call_started()
    theirs = asyncio.create_task(
        ReplyDraft(MESSAGES).write(_stream(then=asyncio.Event()), _nothing)
    )
    board.drafting(theirs)
    board.reply_started()
    await asyncio.sleep(0)
    assert not theirs.done(), "the draft holds only its own call's server"
    assert board.may_draft()
    theirs.cancel()


async def test_a_draft_taken_as_its_calls_reply_is_not_stopped_by_replies() -> None:
    board = DraftBoard(servers=1)
    board.call_started()
    board.call_started()
    mine = asyncio.create_task(ReplyDraft(MESSAGES).write(_stream(then=asyncio.Event()), _nothing))
    board.drafting(mine)
    board.taken(mine)
    board.reply_started()
    await asyncio.sleep(0)
    assert not mine.done()
    mine.cancel()


def test_drafts_are_written_only_while_every_call_has_a_server_of_its_own() -> None:
    board = DraftBoard(servers=2)
    board.call_started()
    assert board.may_draft()
    board.call_started()
    assert board.may_draft()
    board.call_started()
    assert not board.may_draft(), "a third call's replies must not wait for a draft"
    board.call_ended()
    assert board.may_draft()


def test_no_draft_is_written_on_a_server_that_others_write_on_too() -> None:
    # `serve --local-workers` with one embedded server: the workers' replies go there.
    board = DraftBoard(servers=0)
    board.call_started()
    assert not board.may_draft()
