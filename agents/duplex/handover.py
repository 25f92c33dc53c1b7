"""What the caller said that the worker has not answered yet, kept for a takeover.

The gateway streams the caller's audio to the worker in units; the worker says it took
a turn only when it answers (a result with `caller_text`). If the worker dies first,
the question in flight would be lost with it. `UnansweredInput` keeps the front-end
outputs (and key presses) of the caller's current turn, from a little before its speech
began, so the cascade can hear the turn again from the start. It keeps nothing of the
caller's speech over the bot unless the worker took it as a barge-in: that audio is
mostly the bot's own echo, and replayed to the cascade it would sound like a new turn.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from agents.inputs import Digits
from media.frontend import FrontEndOutput
from media.vad import SpeechStarted

RATE = 16000


class UnansweredInput:
    def __init__(self, *, preroll_ms: int = 500, max_s: float = 30.0) -> None:
        self._preroll: deque[FrontEndOutput] = deque()
        self._preroll_samples = 0
        self._preroll_limit = RATE * preroll_ms // 1000
        self._max_samples = int(RATE * max_s)
        # Since the last speech start; trimmed from the front frame by frame when over max_s.
        self._run: deque[FrontEndOutput | Digits] = deque()
        self._run_samples = 0
        self._open = False  # the run is a caller turn the worker has not answered

    def note(self, item: FrontEndOutput | Digits, *, bot_audible: bool) -> None:
        """One input on its way to the worker; `bot_audible` as the caller heard it then."""
        if isinstance(item, Digits):
            self._run.append(item)
            self._open = True
            return
        if not self._open and any(isinstance(e, SpeechStarted) for e in item.events):
            self._run = deque(self._preroll)
            self._run_samples = self._preroll_samples
            self._open = not bot_audible
        self._remember(item)
        if self._run or self._open:
            self._run.append(item)
            self._run_samples += len(item.audio)
            self._trim()

    def barged_in(self) -> None:
        """The worker yielded to the caller: the speech over the bot is their new turn."""
        self._open = True

    def answered(self) -> None:
        """The worker took the caller's turn: nothing is owed."""
        self._open = False
        self._run = deque()
        self._run_samples = 0

    def take(self) -> list[FrontEndOutput | Digits]:
        """The unanswered turn's inputs, oldest first; empty when nothing is owed."""
        run = list(self._run) if self._open else []
        self.answered()
        return run

    def _trim(self) -> None:
        """Keep the turn's last `max_s`; it still starts with speech starting."""
        started = False
        while self._run_samples > self._max_samples and len(self._run) > 1:
            dropped = self._run.popleft()
            if isinstance(dropped, FrontEndOutput):
                self._run_samples -= len(dropped.audio)
                started = started or any(isinstance(e, SpeechStarted) for e in dropped.events)
        head = self._run[0]
        if started and isinstance(head, FrontEndOutput):
            self._run[0] = replace(head, events=[SpeechStarted(head.start_sample), *head.events])

    def _remember(self, item: FrontEndOutput) -> None:
        self._preroll.append(item)
        self._preroll_samples += len(item.audio)
        while self._preroll and self._preroll_samples - len(self._preroll[0].audio) >= (
            self._preroll_limit
        ):
            self._preroll_samples -= len(self._preroll.popleft().audio)
