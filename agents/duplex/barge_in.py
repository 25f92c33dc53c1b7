"""Barge-in at the duplex gateway: the bot held at the caller's first loud words.

The worker hears the caller a unit (about a second) at a time, too late to stop the bot
for an interruption; the gateway hears every frame. So it applies the turn engine's own
rule for speech over the bot (`Overlap`): hold the bot once the caller is loud like a
caller, stop a lowered bot under speech that goes on, play it on lowered again once
the caller falls quiet, clear it for speech as long as an interruption, and otherwise leave
the verdict (a turn to answer, or a backchannel to play on through) to the worker.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from agents.duplex.protocol import Result
from agents.playback import PHONE_RATE, Playback
from agents.turns.engine import Frame, Overlap, RecentFrames, TurnTaking
from callevents import EventSink
from callevents import Hold as HoldEvent
from callevents import Resume as ResumeEvent
from media.frontend import FrontEndOutput
from media.vad import SpeechStarted, SpeechStopped

__all__ = ["GatewayBargeIn"]

RATE = 16000


class GatewayBargeIn:
    """One call's speech over the bot, heard frame by frame at the gateway."""

    def __init__(
        self,
        playback: Playback,
        turns: TurnTaking,
        *,
        unit_ms: int,
        cut: Callable[[str], Awaitable[None]],
        turn_id: Callable[[], int],
        emit: EventSink,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`cut`: the gateway's clear of the bot for the caller's turn (what they heard of
        it goes into the conversation); `turn_id`: the bot turn playing, for the record."""
        self.playback = playback
        self.turns = turns
        self._unit_ms = unit_ms
        self._cut_bot = cut
        self._turn_id = turn_id
        self._emit = emit
        self._clock = clock
        self._overlap: Overlap | None = None
        self._recent = RecentFrames()  # what an onset looked like before it was noticed
        self._speaking = False
        self._position = 0  # 16 kHz front-end samples seen
        self._speech_stopped_at: float | None = None  # on `clock`, while held

    def forget(self) -> None:
        """The bot was cleared for the caller: no speech is over it any more."""
        self._overlap = None
        self._speech_stopped_at = None

    async def hear(self, out: FrontEndOutput) -> None:
        """One front-end output: hold, silence, lower or clear the bot as it calls for."""
        self._position = out.start_sample + len(out.audio)
        audible = self.playback.audible()
        frame = Frame(
            end=self._position,
            samples=len(out.audio),
            level_db=out.level_db,
            noise_floor_db=out.noise_floor_db,
            echo_settled=out.echo_settled,
            bot_audible=audible,
            bot_level_db=self.playback.reference_level_db() if audible else -120.0,
        )
        try:
            await self._frame(frame, out)
        finally:
            self._recent.add(frame)

    async def _frame(self, frame: Frame, out: FrontEndOutput) -> None:
        for event in out.events:
            if isinstance(event, SpeechStarted):
                self._speaking = True
                self._speech_stopped_at = None
                if self._overlap is None and self.playback.audible():
                    self._overlap = Overlap(start=event.sample)
                    self._overlap.count_from_onset(self._recent, self.turns)
            elif isinstance(event, SpeechStopped):
                self._speaking = False
                if self._overlap is not None and not self.playback.holding:
                    self._overlap = None  # never loud enough: the echo, or the room
                elif self.playback.holding:
                    self._speech_stopped_at = self._clock()
                    if self._overlap is not None and self._overlap.lowers_again():
                        await self.playback.lower()
        overlap = self._overlap
        if overlap is None:
            return
        if not self.playback.holding:
            overlap.count(frame, self._speaking, self.turns)
            if overlap.holds(self._position, out.echo_settled, self.turns):
                overlap.held_at = self._position
                await self.playback.hold()
                self._emit(HoldEvent(turn_id=self._turn_id()))
        elif self._speaking:
            overlap.count(frame, self._speaking, self.turns)  # when they were last loud
            factor = 1 if out.echo_settled else 2
            long_ms = self.turns.barge_in_min_speech_ms * factor
            if self._position - overlap.start >= long_ms * RATE // 1000:
                await self._cut("barge_in")
            elif overlap.silences(self._position, self.turns):
                overlap.silenced = True
                await self.playback.silence()
            elif overlap.fell_quiet(self._position, self.turns) and overlap.lowers_again():
                # As at speech detection's stop, which calls it ~110 ms after the last
                # sound: a caller's hum costs them that much less of the bot.
                await self.playback.lower()

    async def _cut(self, reason: str) -> None:
        self.forget()
        await self._cut_bot(reason)

    async def settle(self, result: Result) -> None:
        """A held bot, and the worker's word on the caller's speech: its turn (it yields,
        or answers), or not, once the worker has heard the speech end."""
        if not self.playback.holding:
            return
        if result.yielded or result.caller_text:
            await self._cut("barge_in")
            return
        stopped = self._speech_stopped_at
        # The worker hears the end of the speech within a unit, and decides within the
        # backchannel's allowance after that.
        verdict_s = self._unit_ms / 1000 + self.turns.statement_min_silence_ms / 1000
        if stopped is not None and self._clock() - stopped >= verdict_s:
            held_ms = await self.playback.resume() * 1000 // PHONE_RATE
            self.forget()
            self._emit(ResumeEvent(held_ms=held_ms, reason="backchannel"))
