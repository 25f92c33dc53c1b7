"""Ending and transferring live calls through Twilio's REST API.

The SDK is synchronous; the `*_async` methods run it in a worker thread. Every SDK or
network failure leaves this module as CallControlError.
"""

import asyncio
import logging
import re

from twilio.base.exceptions import TwilioException, TwilioRestException, TwilioServiceException
from twilio.http import HttpClient
from twilio.http.http_client import TwilioHttpClient
from twilio.rest import Client

from telephony.errors import CallControlError
from telephony.twiml import dial_twiml

_log = logging.getLogger(__name__)

# The SDK formats SIDs into the URL path unescaped; refusing anything but letters and
# digits keeps a hostile "CallSid" from steering the request to another resource.
_SID = re.compile(r"[A-Za-z0-9]{2,64}")
_NOT_FOUND_CODE = 20404
DEFAULT_TIMEOUT_S = 10.0


def _check_sid(call_sid: str) -> None:
    if _SID.fullmatch(call_sid) is None:
        raise ValueError(f"expected a CallSid of letters and digits, got {call_sid[:40]!r}")


def _describe(exc: TwilioException) -> str:
    if isinstance(exc, TwilioRestException):
        return f"HTTP {exc.status}, code {exc.code}: {exc.msg}"
    if isinstance(exc, TwilioServiceException):
        return f"HTTP {exc.status}, code {exc.code}: {exc.detail or exc.title}"
    # str() of the SDK's HTTP errors is colourised on a terminal; these base ones are not.
    return f"{type(exc).__name__}: {exc}"


def _is_not_found(exc: TwilioException) -> bool:
    if isinstance(exc, TwilioRestException | TwilioServiceException):
        return exc.status == 404 or exc.code == _NOT_FOUND_CODE
    return False


class CallControl:
    """Hang up or transfer a call by CallSid.

    `http_client` replaces the SDK's HTTP layer (tests fake Twilio's API with it);
    by default requests time out after `timeout_s` seconds.
    """

    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        *,
        http_client: HttpClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not account_sid or not auth_token:
            raise ValueError("expected a non-empty account SID and auth token")
        transport = http_client if http_client is not None else TwilioHttpClient(timeout=timeout_s)
        self._client = Client(account_sid, auth_token, http_client=transport)

    def hang_up(self, call_sid: str) -> None:
        """End the call; a call that has already ended counts as success."""
        _check_sid(call_sid)
        try:
            self._client.calls(call_sid).update(status="completed")
        except TwilioException as exc:
            if _is_not_found(exc):
                # 404 / 20404: the call is over (the caller hung up first); nothing to do.
                _log.info("call %s already ended before hang-up", call_sid)
                return
            raise self._error("hang-up", call_sid, exc) from exc
        except (OSError, ValueError) as exc:
            # OSError: network failure (requests' errors derive from it); ValueError: a
            # response body that is not JSON.
            raise CallControlError(f"hang-up of call {call_sid} failed: {exc!r}") from exc

    def transfer(self, call_sid: str, number: str) -> None:
        """Replace the call's TwiML with a <Dial> to `number` (E.164); ends the stream."""
        _check_sid(call_sid)
        twiml = dial_twiml(number)
        try:
            self._client.calls(call_sid).update(twiml=twiml)
        except TwilioException as exc:
            raise self._error("transfer", call_sid, exc) from exc
        except (OSError, ValueError) as exc:
            raise CallControlError(f"transfer of call {call_sid} failed: {exc!r}") from exc

    async def hang_up_async(self, call_sid: str) -> None:
        # A cancelled await leaves the thread running to completion; the request is
        # bounded by the HTTP timeout.
        await asyncio.to_thread(self.hang_up, call_sid)

    async def transfer_async(self, call_sid: str, number: str) -> None:
        await asyncio.to_thread(self.transfer, call_sid, number)

    @staticmethod
    def _error(action: str, call_sid: str, exc: TwilioException) -> CallControlError:
        status = getattr(exc, "status", None)
        code = getattr(exc, "code", None)
        return CallControlError(
            f"{action} of call {call_sid} failed: {_describe(exc)}",
            status=status if isinstance(status, int) else None,
            code=code if isinstance(code, int) else None,
        )
