"""The reply writer: the bot's words, from the LLM, clause by clause, through Piper to
the caller's ear.

The LLM's stream is cut into clauses as it comes, and each clause is synthesised in turn
(agents/cascade/spoken_reply.py, which the duplex cascade backend speaks its replies
through too) and queued for playback while the model writes the next, so the caller
hears the first clause long before the reply is written. A reply may start from a draft
written while the turn engine waited out the caller's pause (agents/cascade/draft.py).
The writer measures each reply's latency parts; what a reply means for the call (a
farewell, a transfer, a tool call) is the agent's to decide.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.cascade.draft import DraftBoard, ReplyDraft
from agents.cascade.llm import Message, ToolCall
from agents.cascade.spoken_reply import SpokenReply
from agents.cascade.tts import TextToSpeech
from agents.conversation import Turn
from agents.playback import PHONE_RATE, Playback
from agents.scheduler import ModelScheduler
from callevents import EventSink, FirstAudio, LlmFirstToken
from callevents import TurnTiming as TurnTimingEvent

if TYPE_CHECKING:
    from agents.metrics import AgentMetrics as Metrics

__all__ = ["ReplyWriter", "TurnTiming"]

CALLER_RATE = 16000  # the turn engine's clock: front-end samples


@dataclass
class TurnTiming:
    """Per-turn latency parts, in milliseconds (call clock where it matters)."""

    speech_end: int = 0  # 16 kHz sample
    end_of_turn_ms: float = 0.0
    stt_ms: float = 0.0
    llm_first_token_ms: float | None = None
    tts_first_audio_ms: float | None = None
    mouth_to_mouth_ms: float | None = None

    def latency(self) -> dict[str, float | None]:
        """The parts as a bot turn's record keeps them."""
        return {
            "end_of_turn_ms": self.end_of_turn_ms,
            "stt_ms": self.stt_ms,
            "llm_first_token_ms": self.llm_first_token_ms,
            "tts_first_audio_ms": self.tts_first_audio_ms,
            "mouth_to_mouth_ms": self.mouth_to_mouth_ms,
        }

    def event(self, rate: int) -> TurnTimingEvent:
        """The parts as the call's event log has them (`rate`: of `speech_end`)."""
        return TurnTimingEvent(
            speech_end_ms=self.speech_end * 1000 / rate,
            end_of_turn_ms=self.end_of_turn_ms,
            stt_ms=self.stt_ms,
            llm_first_token_ms=self.llm_first_token_ms,
            tts_first_audio_ms=self.tts_first_audio_ms,
            mouth_to_mouth_ms=self.mouth_to_mouth_ms,
        )


Items = Callable[[list[Message]], AsyncIterator[str | ToolCall]]
Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


class ReplyWriter:
    def __init__(
        self,
        *,
        owner: object,
        tts: TextToSpeech,
        scheduler: ModelScheduler,
        drafts: DraftBoard,
        canned: dict[str, np.ndarray],
        playback: Playback,
        metrics: Metrics,
        emit: EventSink,
        items: Items,
        spawn: Spawn,
        on_audible: Callable[[], None],
    ) -> None:
        """`owner`: whose turn model jobs take on the scheduler (the call's agent).
        `items`: the LLM's stream for a conversation. `on_audible`: a reply's audio has
        been queued for the caller (called for every clause)."""
        self._owner = owner
        self._tts = tts
        self._scheduler = scheduler
        self._drafts = drafts
        self._canned = canned
        self._playback = playback
        self._metrics = metrics
        self._emit = emit
        self._items = items
        self._spawn = spawn
        self._on_audible = on_audible
        self._draft: tuple[ReplyDraft, asyncio.Task[None]] | None = None
        self._following: asyncio.Task[None] | None = None  # a taken draft's writer

    # --- speaking ----------------------------------------------------------------------

    async def synthesize(self, text: str) -> np.ndarray:
        return await self._scheduler.run(self._owner, "tts", self._tts.synthesize, text)

    async def speak_canned(self, turn: Turn, text: str, timing: TurnTiming | None = None) -> None:
        """A fixed line (greeting, apology, farewell): pre-synthesised where it can be."""
        pcm = self._canned.get(text)
        if pcm is None:
            pcm = await self.synthesize(text)
        await self.play(turn, pcm, text, timing)

    async def play(
        self, turn: Turn, pcm: np.ndarray, text: str, timing: TurnTiming | None = None
    ) -> int:
        """Queue a clause for the caller; the sample (8 kHz call clock) it starts at."""
        rate = self._tts.sample_rate
        starts_at = await self._playback.play(pcm, rate, text, turn.turn_id)
        if timing is not None and timing.mouth_to_mouth_ms is None:
            # Speech end (16 kHz clock) to the reply's expected start at the ear (8 kHz
            # clock): both count caller audio received.
            gap = starts_at / PHONE_RATE - timing.speech_end / CALLER_RATE
            timing.mouth_to_mouth_ms = gap * 1000
            self._metrics.mouth_to_mouth_seconds.observe(max(gap, 0.0))
        if turn.start_ms is None:
            turn.start_ms = starts_at * 1000 / PHONE_RATE
        turn.end_ms = starts_at * 1000 / PHONE_RATE + len(pcm) * 1000 / rate
        self._on_audible()
        turn.intended = f"{turn.intended} {text}".strip()
        if not turn.truncated:
            turn.text = turn.intended
        return starts_at

    async def write(
        self, turn: Turn, messages: list[Message], timing: TurnTiming | None
    ) -> ToolCall | None:
        """Write and speak a reply to `messages`.

        With tools offered, the model may call one instead of (or after) speaking: the
        call is returned, never spoken, and what follows it is not spoken either."""
        started = time.perf_counter()
        draft = self._take_draft(messages)
        self._drafts.reply_started()
        items = draft.items() if draft is not None else self._items(messages)

        def first_token(elapsed: float) -> None:
            self._metrics.llm_first_token_seconds.observe(elapsed)
            self._emit(LlmFirstToken(ms=elapsed * 1000, drafted=draft is not None))
            if timing is not None:
                timing.llm_first_token_ms = elapsed * 1000

        def first_audio(elapsed: float, text: str) -> None:
            self._metrics.tts_first_audio_seconds.observe(elapsed)
            self._emit(FirstAudio(ms=elapsed * 1000, text=text))
            if timing is not None:
                timing.tts_first_audio_ms = elapsed * 1000

        try:
            spoken = SpokenReply(
                items,
                self.synthesize,
                name="reply-llm",
                started=started,
                on_first_token=first_token,
                on_first_audio=first_audio,
            )
            async with aclosing(spoken) as reply:
                # While the caller holds the bot, the next clause's synthesis waits: the
                # cores are the held words' transcription's, which decides how long the
                # caller hears nothing (a stopped bot) or a lowered one. A lowered bot
                # plays what it has meanwhile.
                unheld = self._playback.until_unheld
                while (clause := await reply.next(before_synthesis=unheld)) is not None:
                    await self.play(turn, clause.pcm, clause.text, timing)
                return reply.tool_call
        finally:
            self.stop_following()  # a reply cut short leaves its draft writing for nobody

    # --- drafts: replies written while the engine waits out a pause ---------------------

    def draft(self, messages: list[Message]) -> None:
        """Start writing the reply to `messages` ahead (unless that draft is under way)."""
        if not self._drafts.may_draft():
            return  # the LLM is writing a reply (this call's or another's)
        if self._draft is not None and self._draft[0].fits(messages):
            return
        self.drop_draft()
        draft = ReplyDraft(messages)
        task = self._spawn(draft.write(self._items(messages), self.synthesize), "draft")
        self._drafts.drafting(task)
        self._draft = (draft, task)

    @property
    def drafting(self) -> bool:
        return self._draft is not None

    def drop_draft(self) -> None:
        """Drop the draft not (yet) taken by a reply. The one a reply follows is the
        reply's: a backchannel's evaluation must not cut it short."""
        if self._draft is not None:
            self._draft[1].cancel()
        self._draft = None

    def stop_following(self) -> None:
        if self._following is not None:
            self._following.cancel()
        self._following = None

    def _take_draft(self, messages: list[Message]) -> ReplyDraft | None:
        """The draft written for exactly `messages`, now the reply's; any other is dropped."""
        if self._draft is not None and self._draft[0].fits(messages):
            draft, self._following = self._draft[0], self._draft[1]
            self._drafts.taken(self._following)
            self._draft = None
            return draft
        self.drop_draft()
        return None
