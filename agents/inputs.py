"""What an agent is given besides audio: inputs that arrive from the telephony side."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Digits"]


@dataclass(frozen=True, slots=True)
class Digits:
    """Keypad presses (DTMF), in the order the caller pressed them."""

    digits: str
