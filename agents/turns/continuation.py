"""The caller's answered turn, and whether what they say next goes on with it.

A caller who goes on after a pause the bot took for their turn's end (before its reply
was heard, or cutting into the reply too soon to be answering its words) has shown how
long they pause: from then on no turn the judge is unsure of is answered before that
pause and a margin more (the patience the judge reads). An early correction ("no, ...") is an
interruption, a turn of its own, and shows no pause.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from agents.turns.config import TurnTaking
from agents.turns.judge import Said
from agents.turns.protocol import Evaluation, Frame, Hearing
from agents.turns.text import opens_an_interruption
from callevents import CallEvent, PatienceRaised

__all__ = ["Continuation"]

RATE = 16000


class Continuation:
    """One call's answered turn and the caller's pauses, fed by the turn engine."""

    def __init__(self, config: TurnTaking, emit: Callable[[CallEvent], None]) -> None:
        self.cfg = config
        self._emit = emit
        self.answered: Said | None = None  # the caller turn the bot is answering
        # Samples of the answering reply audible so far (as the playout clock has it:
        # from when Twilio has it to play), stopping holds excluded (a lowered bot is
        # heard; only the count at an overlap's onset is read).
        self._heard = 0
        self._resumed_at: int | None = None  # the caller's first speech over that reply
        self._continues: Said | None = None  # the answered turn an overlap may go on
        # The pause a carried turn showed: learnt once its words say it goes on.
        self._carried_pause: int | None = None
        # The caller's longest pause the bot answered into, and a margin more.
        self.patience_ms = 0

    # --- the answer ----------------------------------------------------------------------

    def answer(self, said: Said, at: int) -> None:
        """The bot answers the caller's turn `said` at sample `at`."""
        self.answered = dataclasses.replace(said, at=at)
        self._heard = 0
        self._resumed_at = None

    def forget(self) -> None:
        """The answer played out, failed, or was answered some other way."""
        self.answered = None

    def bot_heard(self, samples: int) -> None:
        if self.answered is not None:
            self._heard += samples

    def reopened(self, onset: int) -> None:
        """The caller went on at `onset` before the answer was heard: a pause of theirs,
        if soon after the answer (not a caller prompting a slow reply, 1.8 s on)."""
        answered = self.answered
        if answered is not None and onset - answered.at <= _samples(
            self.cfg.reopen_continuation_ms
        ):
            self._learn_pause(onset - answered.end)
        self.answered = None

    # --- speech over the answer ----------------------------------------------------------

    def speech_over_bot(self, onset: int, recent: Iterable[Frame]) -> None:
        """Speech started at `onset` over the reply: it may go on the answered turn if
        the caller resumed too soon after their pause to be answering the reply (counted
        in reply audio they heard before it, so a hold on "twice," and a resume before
        "because..." do not use the window up). `recent`: the frames since a little
        before the onset, this one included."""
        self._continues = None
        answered = self.answered
        if answered is None:
            return
        if self._resumed_at is None:
            self._resumed_at = onset
        if self._resumed_at - answered.end > _samples(self.cfg.continuation_max_pause_ms):
            return
        since_onset = sum(f.samples for f in recent if f.bot_audible and f.end - f.samples >= onset)
        if self._heard - since_onset <= _samples(self.cfg.continuation_heard_ms):
            self._continues = answered

    @property
    def may_go_on(self) -> bool:
        """The speech over the reply now may be the answered turn going on (see
        `speech_over_bot`)."""
        return self._continues is not None

    def overlap_ended(self) -> None:
        """The speech over the bot did not take the floor."""
        self._continues = None

    def took_floor(self, onset: int) -> None:
        """The caller took the floor with speech that began at `onset`: if it may go on
        from the answered turn, keep the pause it showed until the words say (`judged`)."""
        if self._continues is not None:
            self._carried_pause = (self._resumed_at or onset) - self._continues.end
        self._continues = None
        self.answered = None

    # --- the caller's next turn ----------------------------------------------------------

    def new_turn(self) -> None:
        self._carried_pause = None

    def judged(self, result: Evaluation) -> None:
        """The first words of a turn that cut into the reply soon after it began: it
        goes on from the answered turn unless they stop or correct the bot."""
        pause = self._carried_pause
        if pause is None or result.hearing is not Hearing.HEARD or not result.text.strip():
            return
        self._carried_pause = None
        if not opens_an_interruption(result.text):
            self._learn_pause(pause)

    def _learn_pause(self, pause: int) -> None:
        """The caller went on after a pause this long: wait that out from now on (a
        comma's pause, under a statement's usual wait, changes nothing)."""
        cfg = self.cfg
        pause_ms = pause * 1000 // RATE
        wait_ms = min(pause_ms + cfg.patience_margin_ms, cfg.patience_max_ms)
        longer = wait_ms > max(self.patience_ms, cfg.statement_min_silence_ms)
        if pause_ms <= cfg.continuation_max_pause_ms and longer:
            self.patience_ms = wait_ms
            self._emit(PatienceRaised(pause_ms=pause_ms, wait_ms=wait_ms))


def _samples(ms: int | float) -> int:
    return int(ms * RATE / 1000)
