"""The conversation as the caller experienced it.

The bot's turns hold what the caller actually heard: when a barge-in cuts the bot off,
its turn is cut to the words that played, so the model never believes it said more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

# A key press the app redacted (REDACT_DTMF): the agent knows a key was pressed, not which.
REDACTED_KEY = "\u2022"


def keypad_text(digits: str) -> str:
    """Key presses as the caller's words, for the model and the transcript."""
    if digits and set(digits) == {REDACTED_KEY}:
        count = len(digits)
        return f"(The caller entered {count} digit{'s' if count != 1 else ''}.)"
    return f"(The caller pressed {' '.join(digits)} on the keypad.)"


class Speaker(StrEnum):
    CALLER = "caller"
    BOT = "bot"


@dataclass(slots=True)
class Turn:
    speaker: Speaker
    text: str
    turn_id: int
    truncated: bool = False
    intended: str = ""  # for a bot turn: everything it meant to say
    start_ms: float | None = None  # call clock
    end_ms: float | None = None
    latency: dict[str, float | None] | None = None  # for a bot turn: how long it took


class Conversation:
    def __init__(self, persona: str, *, max_turns: int = 12) -> None:
        self.persona = persona
        self.max_turns = max_turns
        self.turns: list[Turn] = []
        self._next_id = 0

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def add_caller(self, text: str) -> Turn:
        """A caller turn; consecutive caller turns merge (the bot never answered between)."""
        if self.turns and self.turns[-1].speaker is Speaker.CALLER:
            last = self.turns[-1]
            last.text = f"{last.text} {text}".strip()
            return last
        turn = Turn(Speaker.CALLER, text, self._new_id())
        self.turns.append(turn)
        return turn

    def add_digits(self, digits: str) -> Turn:
        return self.add_caller(keypad_text(digits))

    def start_bot(self) -> Turn:
        turn = Turn(Speaker.BOT, "", self._new_id())
        self.turns.append(turn)
        return turn

    def drop(self, turn: Turn) -> None:
        """Forget a turn that never reached the caller (a speculative reply thrown away)."""
        if turn in self.turns:
            self.turns.remove(turn)

    def bot_turn(self, turn_id: int) -> Turn | None:
        for turn in reversed(self.turns):
            if turn.turn_id == turn_id and turn.speaker is Speaker.BOT:
                return turn
        return None

    def last_bot_line(self) -> str:
        """What the caller last heard the bot say (the context their words answer)."""
        for turn in reversed(self.turns):
            if turn.speaker is Speaker.BOT and turn.text:
                return turn.text
        return ""

    def heard(self, turn_id: int, text: str) -> None:
        """The caller interrupted: the bot's turn becomes what was actually played."""
        turn = self.bot_turn(turn_id)
        if turn is None:
            return
        turn.truncated = True
        turn.text = text
        if not text:
            self.turns.remove(turn)

    def cut(self, turn_id: int, text: str, end_ms: float) -> None:
        """The bot's turn was stopped at `end_ms` with `text` of it heard."""
        if (turn := self.bot_turn(turn_id)) is not None:
            turn.end_ms = end_ms
            if text != turn.intended:
                self.heard(turn_id, text)

    def transcript(self) -> dict[str, Any]:
        """The call's transcript, as recorded in transcript.json."""
        return {
            "turns": [
                {
                    "speaker": str(turn.speaker),
                    "text": turn.text,
                    "start_ms": turn.start_ms,
                    "end_ms": turn.end_ms,
                    "truncated": turn.truncated,
                    "intended": turn.intended,
                    "latency": turn.latency,
                }
                for turn in self.turns
                if turn.text
            ]
        }

    def messages_with_caller(self, text: str) -> list[dict[str, str]]:
        """`messages()` as they will be once the caller's `text` is added; nothing changes."""
        ahead = Conversation(self.persona, max_turns=self.max_turns)
        ahead.turns = [replace(turn) for turn in self.turns]
        ahead.add_caller(text)
        return ahead.messages()

    def messages(self) -> list[dict[str, str]]:
        """Chat messages for the LLM: persona first, then the last turns that fit."""
        recent = [t for t in self.turns if t.text][-self.max_turns :] if self.max_turns > 0 else []
        messages = [{"role": "system", "content": self.persona}]
        for turn in recent:
            role = "user" if turn.speaker is Speaker.CALLER else "assistant"
            content = turn.text + (" —" if turn.truncated else "")
            if messages[-1]["role"] == role:
                messages[-1]["content"] += " " + content
            else:
                messages.append({"role": role, "content": content})
        return messages
