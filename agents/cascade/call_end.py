"""A reply that ends the call or hands it over: acted on once Twilio has played it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from agents.control import CallControls, EndReason, TransferReason
from agents.conversation import Turn
from agents.playback import Playback

__all__ = ["PLAYED_OUT_SLACK_S", "EndCall", "Then", "Transfer", "once_heard"]

log = logging.getLogger(__name__)

# A goodbye (or an announcement) that Twilio never confirms as played: its length plus
# this much, and the call is ended (or transferred) anyway.
PLAYED_OUT_SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class EndCall:
    reason: EndReason


@dataclass(frozen=True, slots=True)
class Transfer:
    reason: TransferReason


# What happens once a reply has been heard: nothing, the call ends, or it is transferred.
Then = EndCall | Transfer | None


async def once_heard(
    turn: Turn, then: EndCall | Transfer, playback: Playback, controls: CallControls
) -> Literal["done", "talked_over", "refused"]:
    """Wait until Twilio has played `turn` (its marks echoed), then end or transfer the
    call. "talked_over": the caller talked over the goodbye, and has more to say;
    "refused": the transfer could not be made."""
    spoken_s = max(0.0, ((turn.end_ms or 0.0) - playback.now() / 8) / 1000)
    if not await playback.played_out(spoken_s + PLAYED_OUT_SLACK_S):
        log.warning("the bot's last words were not confirmed played; going on anyway")
    if isinstance(then, EndCall):
        if then.reason in ("farewell", "llm") and turn.truncated:
            return "talked_over"
        await controls.end_call(then.reason)
        return "done"
    return "done" if await controls.transfer(then.reason) else "refused"
