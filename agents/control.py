"""What an agent may do to the call itself: end it, or hand it to a person.

Agents decide *when* (the caller said goodbye, asked for a person, pressed the transfer
key, the LLM called a tool, the call ran too long, nobody answered a re-prompt); the app
decides *how* (close the Media Stream, Twilio's REST API) behind `CallControls`, so
agents/ never imports the app or Twilio's client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "CALL_TOOLS",
    "CallControls",
    "CallPolicy",
    "EndReason",
    "TransferReason",
]

# Why the bot ends a call: the caller's goodbye, the LLM's `end_call`, MAX_CALL_S, no
# answer to a re-prompt after a long silence, a voicemail message left (or not).
EndReason = Literal["farewell", "llm", "max_duration", "silence", "voicemail"]
# Why the bot transfers: the caller's words, the transfer key, the LLM's `transfer_call`.
TransferReason = Literal["words", "key", "llm"]


class CallControls(Protocol):
    """The call's own controls, as the app wires them."""

    def transfer_refusal(self) -> str | None:
        """Why a transfer cannot be made now (None: it can). Logged by the app."""
        ...

    async def end_call(self, reason: EndReason) -> None:
        """End the call now (what had to be said has been heard)."""
        ...

    async def transfer(self, reason: TransferReason) -> bool:
        """Hand the call to the transfer target; False if that failed (the call goes on)."""
        ...


@dataclass(frozen=True, slots=True)
class CallPolicy:
    """When and how the bot ends or hands over a call; the app builds it from settings."""

    # Empty: the caller's words never transfer (the LLM's tool still may, and is refused).
    transfer_to: str = ""
    transfer_announcement: str = "Please hold while I transfer you to a person."
    transfer_refusal: str = "Sorry, I can't transfer you to a person right now."
    transfer_key: str = ""  # a DTMF key that asks for a person
    # Silence after the bot's turn before it re-prompts, and after the re-prompt before it
    # says goodbye and hangs up (0: never).
    silence_timeout_s: float = 0.0
    # Detect "a person, please" from the caller's words (off when the LLM decides with
    # tools: it hears them too, in context). A goodbye is always heard from the words.
    words: bool = True


# The tools an LLM is offered (OpenAI-style function calling), when LLM_TOOLS allows.
CALL_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "end_call",
            "description": (
                "End the phone call. Use it when the conversation is over: the caller "
                "has what they needed and is done. The bot says goodbye itself."
            ),
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "transfer_call",
            "description": (
                "Transfer the caller to a human. Use it when the caller asks for a "
                "person, or needs something only a person can do."
            ),
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
