"""Placing, ending and transferring calls through Twilio's REST API (the Call resource).

https://www.twilio.com/docs/voice/api/call-resource — create (POST .../Calls.json) and
update (POST .../Calls/{CallSid}.json, `Status=completed` or new `Twiml`).

The SDK is synchronous; the `*_async` methods run it in a worker thread. Every SDK or
network failure leaves this module as CallControlError.
"""

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from twilio.base.exceptions import TwilioException, TwilioRestException, TwilioServiceException
from twilio.http import HttpClient
from twilio.http.http_client import TwilioHttpClient
from twilio.http.response import Response
from twilio.rest import Client

from telephony.errors import CallControlError
from telephony.twiml import dial_twiml

_log = logging.getLogger(__name__)

# The SDK formats SIDs into the URL path unescaped; refusing anything but letters and
# digits keeps a hostile "CallSid" from steering the request to another resource.
_SID = re.compile(r"[A-Za-z0-9]{2,64}")
_NOT_FOUND_CODE = 20404
DEFAULT_TIMEOUT_S = 10.0
TWILIO_API = "https://api.twilio.com"
# Every call progress event a REST-created call can report to its StatusCallback.
STATUS_EVENTS = ("initiated", "ringing", "answered", "completed")


class _Rebased(TwilioHttpClient):
    """The SDK's HTTP client, sending what it would send to api.twilio.com elsewhere
    (an API proxy, or a fake Twilio in tests)."""

    def __init__(self, base: str, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self._base = base.rstrip("/")

    def request(
        self,
        method: str,
        url: str,
        params: dict[str, object] | None = None,
        data: dict[str, object] | None = None,
        headers: dict[str, str] | None = None,
        auth: tuple[str, str] | None = None,
        timeout: float | None = None,
        allow_redirects: bool = False,
    ) -> Response:
        if url.startswith(TWILIO_API):
            url = self._base + url[len(TWILIO_API) :]
        return super().request(method, url, params, data, headers, auth, timeout, allow_redirects)


@dataclass(frozen=True, slots=True)
class OutboundCall:
    """What a new call dials and where Twilio fetches its TwiML and reports its progress."""

    to: str
    from_: str
    url: str  # the voice webhook (our /twilio/voice), fetched with POST when answered
    status_callback: str | None = None
    # Asynchronous answering-machine detection: the call connects at once, and Twilio
    # posts `AnsweredBy` to `amd_callback` when it knows (after the beep, with
    # DetectMessageEnd). https://www.twilio.com/docs/voice/answering-machine-detection
    amd_callback: str | None = None
    status_events: Sequence[str] = STATUS_EVENTS


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
    """Place a call, or hang up or transfer one by CallSid.

    `http_client` replaces the SDK's HTTP layer (tests fake Twilio's API with it);
    `api_base` sends the requests somewhere other than https://api.twilio.com (a proxy,
    a fake Twilio server); by default requests time out after `timeout_s` seconds.
    """

    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        *,
        http_client: HttpClient | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        api_base: str = TWILIO_API,
    ) -> None:
        if not account_sid or not auth_token:
            raise ValueError("expected a non-empty account SID and auth token")
        if http_client is not None:
            transport = http_client
        elif api_base and api_base.rstrip("/") != TWILIO_API:
            transport = _Rebased(api_base, timeout_s)
        else:
            transport = TwilioHttpClient(timeout=timeout_s)
        self._client = Client(account_sid, auth_token, http_client=transport)

    def place_call(self, call: OutboundCall) -> str:
        """Create the call; returns its CallSid (Twilio dials it once queued)."""
        amd = call.amd_callback is not None
        try:
            created = self._client.calls.create(
                to=call.to,
                from_=call.from_,
                url=call.url,
                method="POST",
                status_callback=call.status_callback,
                status_callback_method="POST" if call.status_callback else None,
                status_callback_event=list(call.status_events) if call.status_callback else None,
                machine_detection="DetectMessageEnd" if amd else None,
                async_amd="true" if amd else None,
                async_amd_status_callback=call.amd_callback,
                async_amd_status_callback_method="POST" if amd else None,
            )
        except TwilioException as exc:
            raise self._error("placing a call to", call.to, exc) from exc
        except (OSError, ValueError) as exc:
            raise CallControlError(f"placing a call to {call.to} failed: {exc!r}") from exc
        if not created.sid:
            raise CallControlError(f"placing a call to {call.to}: Twilio returned no CallSid")
        return str(created.sid)

    async def place_call_async(self, call: OutboundCall) -> str:
        return await asyncio.to_thread(self.place_call, call)

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
        """Replace the call's TwiML with a <Dial> to `number` (E.164 or a sip: URI); the
        stream ends and Twilio dials."""
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
