"""Caller speech over the bot: whether it is loud enough to hold the bot, the one rule the
turn engine and the duplex gateway both apply, and the recent frames it is judged on."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from agents.turns.config import TurnTaking
from agents.turns.protocol import Evaluation, Frame, Hearing
from agents.turns.text import takes_the_turn

__all__ = ["Overlap", "RecentFrames", "lets_the_bot_go_on"]

RATE = 16000


@dataclass(slots=True)
class Overlap:
    """Caller speech that started over the bot, and whether it is loud enough to hold
    the bot: the one rule the engine and the duplex gateway both apply."""

    start: int
    loud: int = 0  # samples loud like a caller (above the echo and the room)
    over_bot: int = 0  # samples while the bot was audible
    stopped: int | None = None  # where the speech stopped, when it has
    held_at: int | None = None
    silenced: bool = False  # a lowered hold, stopped while the caller goes on
    lowered_again: bool = False  # ...and played on lowered at a stop of theirs
    last_loud: int | None = None  # the end of the last frame loud like a caller
    restarted: int | None = None  # where speech last began again after a stop

    def count(self, frame: Frame, speaking: bool, cfg: TurnTaking) -> None:
        if frame.bot_audible:
            self.over_bot += frame.samples
        above_echo = frame.level_db >= frame.bot_level_db - cfg.echo_margin_db
        above_room = frame.level_db >= frame.noise_floor_db + cfg.barge_in_over_floor_db
        if speaking and (above_echo or not frame.bot_audible) and above_room:
            self.loud += frame.samples
            self.last_loud = frame.end

    def count_from_onset(self, frames: Iterable[Frame], cfg: TurnTaking) -> None:
        """Count the frames between the speech's onset and the detector saying so (~80 ms
        later), so a hold is timed from what the caller said, not from when it was
        noticed: counted from the notice, the bot started its next sentence 140 ms into
        a caller's "Yeah." in its pause (bench turns, echo line, the same spot in two
        runs), the `clear` one frame late."""
        for frame in frames:
            if frame.end - frame.samples // 2 > self.start:
                self.count(frame, True, cfg)

    def holds(self, position: int, echo_settled: bool, cfg: TurnTaking) -> bool:
        """Loud for long enough, and for a third of the speech at least; or speech that
        has gone on as long as an interruption does, loud like a caller at times."""
        # Until the echo canceller has found the echo path, the bot's echo gets through
        # at its raw level (a speakerphone's is ~10 dB under the bot, inside the echo
        # margin) in word-long runs: only longer speech is surely the caller. A hold on
        # echo would also re-send the audio and set the canceller back.
        hold_ms = cfg.hold_min_speech_ms if echo_settled else cfg.hold_unsettled_ms
        hold_at = _samples(hold_ms)
        speech = position - self.start
        if self.loud >= hold_at and self.loud * 3 >= speech:
            return True
        # The canceller can also hold a caller under the echo margin for seconds (AEC3
        # on a -10 dB speakerphone, for a whole greeting on some renditions of it:
        # docs/benchmarks.md). Echo gets past speech detection's gate in word-long runs
        # at most, so speech as long as the barge-in's is the caller's, however low the
        # canceller put it.
        factor = 1 if echo_settled else 2
        goes_on = speech >= _samples(cfg.barge_in_min_speech_ms) * factor
        return goes_on and self.loud >= _samples(cfg.hold_min_speech_ms)

    def silences(self, position: int, cfg: TurnTaking) -> bool:
        """A lowered hold under speech gone on past a listener's noise, and loud still
        (speech detection says speech ~80 ms past its end): it may be an interruption,
        which is not to be talked over for long, even quietly."""
        if cfg.hold_duck_db <= 0 or cfg.lowered_hold_ms <= 0 or self.silenced:
            return False
        loud_now = self.last_loud == position
        return loud_now and position - self.start >= _samples(cfg.lowered_hold_ms)

    def fell_quiet(self, position: int, cfg: TurnTaking) -> bool:
        """Whether a silenced bot's caller has been under a caller's level for
        `lowered_again_quiet_ms`; asked while speech detection still says speech."""
        if cfg.lowered_again_quiet_ms <= 0 or not self.silenced or self.last_loud is None:
            return False
        return position - self.last_loud >= _samples(cfg.lowered_again_quiet_ms)

    def lowers_again(self) -> bool:
        """Whether a silenced bot plays on lowered now that the speech stopped, while its
        words are judged. Once: a caller who speaks again after that is talking, not
        humming, and the bot stays silent in their next pauses (between words, it
        came back ~100 ms at a time)."""
        if not self.silenced or self.lowered_again:
            return False
        self.silenced, self.lowered_again = False, True
        return True


class RecentFrames:
    """The last few frames: what a speech onset the detector reports late looked like."""

    def __init__(self, keep_ms: int = 400) -> None:
        self._frames: deque[Frame] = deque()
        self._keep = _samples(keep_ms)

    def add(self, frame: Frame) -> None:
        self._frames.append(frame)
        while self._frames and self._frames[0].end <= frame.end - self._keep:
            self._frames.popleft()

    def __iter__(self) -> Iterator[Frame]:
        return iter(self._frames)


def _samples(ms: int | float) -> int:
    return int(ms * RATE / 1000)


def lets_the_bot_go_on(result: Evaluation, speech_ms: int, cfg: TurnTaking) -> bool:
    """Whether speech over the bot that held it lets it go on, judged on its words.

    Nothing made out of it, a backchannel's words, or a hum Whisper made words of: the bot
    goes on. Short words that take the turn (a refusal, a correction) stop it; someone who
    means to interrupt keeps talking, and that stops it by length.
    (`python -m benchmarks held-words` measures this on fresh voices and sentences.)
    """
    if result.hearing is not Hearing.HEARD:
        return True
    return not takes_the_turn(result.text, speech_ms=speech_ms) and (
        speech_ms <= cfg.backchannel_max_ms
    )
