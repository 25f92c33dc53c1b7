"""A call's own controls, as the agents ask for them: end the call, transfer it.

Ending always closes the Media Stream: Twilio then runs the TwiML after `<Connect>`,
which is `<Hangup/>` (telephony/twiml.py). With REST credentials the call is first
completed over Twilio's REST API (`Status=completed`), which ends it even if the
socket's close were lost. A transfer needs the REST API: the call's TwiML is replaced
with `<Dial>` (https://www.twilio.com/docs/voice/api/call-resource#update-a-call-resource),
which ends the stream and dials the target.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agents.control import EndReason, TransferReason
from app.settings import Settings
from callevents import CallEnded, CallEvent, Transfer
from telephony.control import CallControl
from telephony.errors import CallControlError

log = logging.getLogger(__name__)


def rest_client(settings: Settings) -> CallControl | None:
    """Twilio's REST API for this account, or None without credentials."""
    if not settings.rest_credentials:
        return None
    return CallControl(
        settings.twilio_account_sid,
        settings.twilio_auth_token,
        api_base=settings.twilio_api_url,
    )


@dataclass
class Ended:
    """How the bot ended the call, for the record (meta.json)."""

    outcome: str  # "bot_hangup" or "transferred"
    reason: str
    transfer_to: str = ""


class SessionControls:
    """CallControls for one call: `close` closes its stream, `record` writes its timeline,
    `ended` is told how the bot ended it."""

    def __init__(
        self,
        call_sid: str,
        settings: Settings,
        rest: CallControl | None,
        *,
        close: Callable[[], Awaitable[None]],
        record: Callable[[CallEvent], None],
        ended: Callable[[Ended], None],
    ) -> None:
        self.call_sid = call_sid
        self.settings = settings
        self.rest = rest
        self._close = close
        self._record = record
        self._ended = ended

    def transfer_refusal(self) -> str | None:
        if not self.settings.transfer_to:
            why = "TRANSFER_TO is not set"
        elif self.rest is None:
            why = "Twilio REST credentials (TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN) are not set"
        else:
            return None
        log.warning("call %s: transfer refused: %s", self.call_sid, why)
        return why

    async def end_call(self, reason: EndReason) -> None:
        via, error = "stream", ""
        if self.rest is not None:
            try:
                await self.rest.hang_up_async(self.call_sid)
                via = "rest"
            except CallControlError as exc:
                # Closing the stream below still ends the call (<Hangup/> after <Connect>).
                error = str(exc)
                log.warning(
                    "call %s: REST hang-up failed (%s); closing the stream", self.call_sid, exc
                )
        self._ended(Ended("bot_hangup", reason))
        self._record(CallEnded(reason=reason, via=via, error=error))
        log.info("call %s: the bot hung up (%s, via %s)", self.call_sid, reason, via)
        await self._close()

    async def transfer(self, reason: TransferReason) -> bool:
        target = self.settings.transfer_to
        if self.rest is None or not target:
            self.transfer_refusal()
            return False
        try:
            await self.rest.transfer_async(self.call_sid, target)
        except CallControlError as exc:
            log.warning("call %s: transfer to %s failed: %s", self.call_sid, target, exc)
            self._record(Transfer(target=target, reason=reason, ok=False, error=str(exc)))
            return False
        self._ended(Ended("transferred", reason, transfer_to=target))
        self._record(Transfer(target=target, reason=reason, ok=True))
        log.info("call %s: transferred to %s (%s)", self.call_sid, target, reason)
        # Twilio now runs the <Dial>: the stream is over for it; close our end too.
        await self._close()
        return True
