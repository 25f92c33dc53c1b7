"""Speech over the bot at the duplex gateway, frame by frame on the call clock.

The bot plays a 4 s reply from the start of the call; 1 s in, the caller speaks over it
at a caller's level (-20 dBFS against the bot's echo at about -13 dBFS, inside the echo
margin; a room at -70 dBFS; the bot's echo, when heard as speech, at -30 dBFS). Speech
detection reports a start 80 ms after the onset and a stop 100 ms after the last sound,
as Silero does. The worker's verdicts are given by the test, as a worker's `Result`s
would bring them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from agents.duplex.barge_in import GatewayBargeIn
from agents.duplex.protocol import Result
from agents.playback import Playback
from agents.turns.engine import TurnTaking
from callevents import CallEvent
from callevents import Clear as ClearEvent
from callevents import Hold as HoldEvent
from callevents import Resume as ResumeEvent
from media.frontend import FrontEndOutput
from media.vad import SpeechStarted, SpeechStopped, VadEvent
from tests.agents.fakes import Clock, RecordingSink, tone

RATE = 16000
FRAME = RATE // 50  # the front end's 20 ms outputs
ONSET_MS = 1000
CALLER_DB, ECHO_DB, ROOM_DB = -20.0, -30.0, -70.0
STARTED_AFTER_MS, STOPPED_AFTER_MS = 80, 100
STOPPED = TurnTaking()  # the engine's default hold: the bot is stopped
LOWERED = TurnTaking(hold_duck_db=20.0, lowered_hold_ms=200)


@dataclass
class Call:
    """The gateway's barge-in over a real Playback, and what came of it."""

    turns: TurnTaking
    clock: Clock = field(default_factory=Clock)
    sink: RecordingSink = field(default_factory=RecordingSink)
    events: list[CallEvent] = field(default_factory=list)
    cuts: list[str] = field(default_factory=list)
    seconds: float = 0.0  # the gateway's wall clock, moved with the call's
    audible_ms: list[int] = field(default_factory=list)  # frames the bot was heard in

    def __post_init__(self) -> None:
        self.playback = Playback(
            self.sink, self.clock, on_event=self.events.append, hold_duck_db=self.turns.hold_duck_db
        )
        self.barge_in = GatewayBargeIn(
            self.playback,
            self.turns,
            unit_ms=1000,
            cut=self._cut,
            turn_id=lambda: 1,
            emit=self.events.append,
            clock=lambda: self.seconds,
        )
        self.position = 0  # 16 kHz

    async def _cut(self, reason: str) -> None:
        self.cuts.append(reason)
        await self.playback.clear(reason)

    async def reply(self, seconds: float = 4.0) -> None:
        await self.playback.play(tone(seconds, RATE), RATE, "a long reply", turn_id=1)

    async def frames(
        self, ms: int, level_db: float = ROOM_DB, events: tuple[VadEvent, ...] = ()
    ) -> None:
        """`ms` of the caller's line at `level_db`; `events` go with the first frame."""
        for index in range(ms // 20):
            out = FrontEndOutput(
                audio=np.zeros(FRAME, dtype=np.float32),
                start_sample=self.position,
                events=list(events) if index == 0 else [],
                level_db=level_db,
                noise_floor_db=ROOM_DB,
            )
            self.position += FRAME
            self.clock.samples = self.position // 2
            self.seconds = self.position / RATE
            await self.barge_in.hear(out)
            if self.playback.audible():
                self.audible_ms.append(self.ms())

    def ms(self) -> int:
        return self.position * 1000 // RATE

    async def speech(self, speech_ms: int) -> None:
        """Caller speech of `speech_ms` from now, and speech detection's stop after it."""
        onset = self.position
        await self.frames(STARTED_AFTER_MS, level_db=CALLER_DB)
        await self.frames(20, level_db=CALLER_DB, events=(SpeechStarted(onset),))
        await self.frames(speech_ms - STARTED_AFTER_MS - 20, level_db=CALLER_DB)
        stopped = SpeechStopped(self.position)
        await self.frames(STOPPED_AFTER_MS)
        await self.frames(20, events=(stopped,))

    def of(self, kind: type[CallEvent]) -> list[CallEvent]:
        return [event for event in self.events if isinstance(event, kind)]

    def clears(self) -> list[str]:
        return [event.reason for event in self.events if isinstance(event, ClearEvent)]

    def longest_gap(self, lo_ms: int, hi_ms: int) -> int:
        """The longest stretch in [lo_ms, hi_ms) in which the caller heard no bot."""
        heard = sorted(ms for ms in self.audible_ms if lo_ms <= ms < hi_ms)
        return max(b - a - 20 for a, b in pairwise([lo_ms - 20, *heard, hi_ms]))


async def _over_the_reply(turns: TurnTaking, speech_ms: int) -> Call:
    call = Call(turns)
    await call.reply()
    await call.frames(ONSET_MS)
    await call.speech(speech_ms)
    return call


async def test_loud_words_over_the_bot_hold_it_within_a_tenth_of_a_second_of_their_onset() -> None:
    call = Call(STOPPED)
    await call.reply()
    await call.frames(ONSET_MS)
    await call.speech(300)
    assert call.of(HoldEvent) and call.clears() == ["hold"], call.events
    assert call.playback.holding
    heard_after_onset = max(ms for ms in call.audible_ms if ms >= ONSET_MS) - ONSET_MS
    assert heard_after_onset <= 100, f"the bot played on {heard_after_onset} ms"


async def test_speech_at_the_echo_s_level_is_not_a_caller_and_the_bot_plays_on() -> None:
    call = Call(STOPPED)
    await call.reply()
    await call.frames(ONSET_MS)
    onset = call.position
    # Speech detection hears the bot's own echo as speech: above the room, but more than
    # the echo margin under the bot.
    await call.frames(80, ECHO_DB)
    await call.frames(20, ECHO_DB, events=(SpeechStarted(onset),))
    await call.frames(200, ECHO_DB)
    await call.frames(20, events=(SpeechStopped(call.position),))
    assert not call.of(HoldEvent) and not call.clears(), call.events
    assert call.longest_gap(ONSET_MS, call.ms()) == 0


async def test_a_held_bot_resumes_once_the_worker_has_had_the_speech_s_end_and_said_nothing() -> (
    None
):
    call = await _over_the_reply(STOPPED, 300)
    nothing = Result(seq=2, action="listen")
    # The worker hears the speech's end within a unit (1 s), and decides within the
    # backchannel's allowance (700 ms) after that: before, silence from it is no verdict.
    await call.barge_in.settle(nothing)
    await call.frames(1680)
    await call.barge_in.settle(nothing)
    assert call.playback.holding and not call.of(ResumeEvent)
    await call.frames(40)
    await call.barge_in.settle(nothing)
    assert not call.playback.holding
    [resumed] = call.of(ResumeEvent)
    assert isinstance(resumed, ResumeEvent) and resumed.reason == "backchannel"
    assert call.cuts == [] and call.playback.audible()


async def test_a_worker_that_yields_or_hears_a_turn_clears_the_held_bot() -> None:
    for verdict in (
        Result(seq=2, action="listen", yielded=True),
        Result(seq=2, action="listen", caller_text="Wait, which one?"),
    ):
        call = await _over_the_reply(STOPPED, 300)
        await call.barge_in.settle(verdict)
        assert call.cuts == ["barge_in"] and not call.playback.holding
        await call.frames(500)
        assert not call.playback.audible(), "the cleared reply came back"


async def test_speech_as_long_as_an_interruption_clears_the_bot_without_the_worker() -> None:
    call = await _over_the_reply(STOPPED, 1300)
    assert call.cuts == ["barge_in"]
    assert not call.playback.holding and not call.of(ResumeEvent)


async def test_a_lowered_bot_is_silenced_under_speech_that_goes_on_and_lowered_at_its_stop() -> (
    None
):
    call = await _over_the_reply(LOWERED, 500)
    assert call.clears() == ["hold", "silence"], call.events
    # Lowered at the hold: heard under the caller until the lowered hold runs out.
    assert call.longest_gap(ONSET_MS, ONSET_MS + 200) == 0
    # Silenced from then until it plays on lowered again, at speech detection's stop
    # (told in the frame after STOPPED_AFTER_MS of quiet).
    silenced_ms = ONSET_MS + LOWERED.lowered_hold_ms
    back_ms = min((ms for ms in call.audible_ms if ms > silenced_ms), default=None)
    assert back_ms == ONSET_MS + 500 + STOPPED_AFTER_MS + 20, call.audible_ms
    assert not [ms for ms in call.audible_ms if silenced_ms <= ms < back_ms]
    assert call.playback.holding and call.playback.audible()
    assert call.cuts == []


async def test_a_hum_shorter_than_the_lowered_hold_never_silences_the_bot() -> None:
    call = await _over_the_reply(LOWERED, 160)
    assert call.clears() == ["hold"], call.events
    assert call.longest_gap(ONSET_MS, call.ms()) == 0
    assert call.playback.holding


QUIET_LOWERS = TurnTaking(hold_duck_db=20.0, lowered_hold_ms=200, lowered_again_quiet_ms=60)


async def test_a_silenced_bot_plays_on_lowered_once_the_caller_is_60_ms_quiet() -> None:
    call = await _over_the_reply(QUIET_LOWERS, 500)
    end_ms = ONSET_MS + 500
    silenced_ms = ONSET_MS + QUIET_LOWERS.lowered_hold_ms
    back_ms = min((ms for ms in call.audible_ms if ms > silenced_ms), default=None)
    # Heard (lowered) again at the end of 60 ms of quiet, not at speech detection's stop
    # 100 ms after the last sound; silent from the silence until then.
    assert back_ms == end_ms + 60, call.audible_ms
    assert not [ms for ms in call.audible_ms if silenced_ms <= ms < back_ms], call.audible_ms
    assert call.clears() == ["hold", "silence"], call.events
    assert call.playback.holding and call.cuts == []


async def test_a_40_ms_closure_inside_a_word_does_not_bring_the_bot_back() -> None:
    call = Call(QUIET_LOWERS)
    await call.reply()
    await call.frames(ONSET_MS)
    onset = call.position
    await call.frames(STARTED_AFTER_MS, level_db=CALLER_DB)
    await call.frames(20, level_db=CALLER_DB, events=(SpeechStarted(onset),))
    await call.frames(200, level_db=CALLER_DB)  # silenced by now
    await call.frames(40)  # a stop consonant's closure
    await call.frames(200, level_db=CALLER_DB)
    assert call.longest_gap(ONSET_MS + 220, call.ms()) >= call.ms() - (ONSET_MS + 240)
    assert call.clears() == ["hold", "silence"], call.events


async def test_lowered_again_once_a_caller_loud_again_silences_it_for_good() -> None:
    call = await _over_the_reply(QUIET_LOWERS, 500)
    await call.speech(300)  # they talk on after the hum
    assert call.clears() == ["hold", "silence", "silence"], call.events
    after_ms = ONSET_MS + 500 + STOPPED_AFTER_MS + 20 + 100
    assert not [ms for ms in call.audible_ms if ms > after_ms], "lowered a second time"
