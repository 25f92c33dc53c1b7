"""A caller who says nothing after the bot's turn: asked again, then said goodbye to."""

from __future__ import annotations

from typing import Literal

__all__ = ["SilenceWatch"]


class SilenceWatch:
    """Counts the caller's silence while nobody has anything to say. After `timeout_s` of
    it the bot asks again; after as long again, it says goodbye."""

    def __init__(self, rate: int) -> None:
        self._rate = rate
        self._quiet_since = 0  # sample where the silence began
        self._prompted = False  # asked again in this silence (until they speak)

    def check(
        self, position: int, *, timeout_s: float, busy: bool, speaking: bool, can_ask: bool
    ) -> Literal["ask_again", "goodbye"] | None:
        """`busy`: someone is talking, or a reply or an evaluation is under way."""
        if busy or timeout_s <= 0:
            if speaking:
                self._prompted = False
            self._quiet_since = position
            return None
        if position - self._quiet_since < timeout_s * self._rate:
            return None
        self._quiet_since = position
        if not self._prompted and can_ask:
            self._prompted = True
            return "ask_again"
        return "goodbye"
