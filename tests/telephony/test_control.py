"""CallControl against a fake of Twilio's REST API, faked at the SDK's HTTP layer."""

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import pytest
import requests
from twilio.http import HttpClient
from twilio.http.response import Response

from telephony.control import CallControl
from telephony.errors import CallControlError

ACCOUNT_SID = "AC25e16e9a716a4a1786a7c83f58e30482"
AUTH_TOKEN = "auth-token-for-tests"
CALL_SID = "CA1f4b9d2e0a5c4e3f8b7a6d5c4b3a2f1e"
CALL_PATH = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls/{CALL_SID}.json"


@dataclass(frozen=True)
class SentRequest:
    method: str
    url: str
    params: dict[str, object] | None
    data: dict[str, object] | None
    auth: tuple[str, str] | None
    thread_id: int


class FakeTwilioApi(HttpClient):
    """Records each request and answers it with `respond`, like httpx's MockTransport."""

    def __init__(self, respond: Callable[[SentRequest], Response]) -> None:
        super().__init__(logging.getLogger("tests.fake_twilio_api"), is_async=False)
        self._respond = respond
        self.sent: list[SentRequest] = []

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
        sent = SentRequest(method, url, params, data, auth, threading.get_ident())
        self.sent.append(sent)
        return self._respond(sent)


def _call_resource(status: str) -> Response:
    # Trimmed from a real Call resource; the SDK reads whatever fields are present.
    body = {
        "sid": CALL_SID,
        "account_sid": ACCOUNT_SID,
        "api_version": "2010-04-01",
        "status": status,
        "direction": "inbound",
        "from": "+15557654321",
        "to": "+15551234567",
        "date_created": "Tue, 04 Jun 2024 10:00:00 +0000",
        "date_updated": "Tue, 04 Jun 2024 10:01:00 +0000",
        "uri": CALL_PATH,
    }
    return Response(200, json.dumps(body))


def _error(status: int, code: int, message: str) -> Response:
    body = {
        "code": code,
        "message": message,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
    return Response(status, json.dumps(body))


def _not_found(_: SentRequest) -> Response:
    return _error(404, 20404, f"The requested resource {CALL_PATH} was not found")


def _control(api: FakeTwilioApi) -> CallControl:
    return CallControl(ACCOUNT_SID, AUTH_TOKEN, http_client=api)


def _fails(api: FakeTwilioApi, action: Callable[[CallControl], None]) -> CallControlError:
    with pytest.raises(CallControlError) as caught:
        action(_control(api))
    return caught.value


# --- hang_up -----------------------------------------------------------------------------


def test_hang_up_posts_status_completed_to_the_call_resource() -> None:
    api = FakeTwilioApi(lambda _: _call_resource("completed"))

    _control(api).hang_up(CALL_SID)

    [sent] = api.sent
    assert sent.method == "POST"
    assert urlsplit(sent.url).path == CALL_PATH
    assert sent.data == {"Status": "completed"}


def test_hang_up_authenticates_with_the_account() -> None:
    api = FakeTwilioApi(lambda _: _call_resource("completed"))

    _control(api).hang_up(CALL_SID)

    assert api.sent[0].auth == (ACCOUNT_SID, AUTH_TOKEN)


def test_hang_up_of_a_call_that_already_ended_succeeds() -> None:
    api = FakeTwilioApi(_not_found)

    _control(api).hang_up(CALL_SID)

    assert len(api.sent) == 1


def test_hang_up_treats_a_problem_details_404_as_already_ended() -> None:
    body = {
        "type": "https://www.twilio.com/docs/errors/20404",
        "title": "Not Found",
        "status": 404,
        "code": 20404,
        "detail": "no such call",
    }
    api = FakeTwilioApi(lambda _: Response(404, json.dumps(body)))

    _control(api).hang_up(CALL_SID)

    assert len(api.sent) == 1


def test_hang_up_maps_an_api_error_with_status_and_code() -> None:
    api = FakeTwilioApi(lambda _: _error(401, 20003, "Authenticate"))

    error = _fails(api, lambda control: control.hang_up(CALL_SID))

    assert (error.status, error.code) == (401, 20003)
    assert "Authenticate" in str(error)
    assert CALL_SID in str(error)


def test_hang_up_maps_a_server_error_without_a_json_body() -> None:
    api = FakeTwilioApi(lambda _: Response(503, "<html>Service Unavailable</html>"))

    error = _fails(api, lambda control: control.hang_up(CALL_SID))

    assert error.status == 503


def test_hang_up_maps_a_network_failure() -> None:
    def unreachable(_: SentRequest) -> Response:
        raise requests.ConnectionError("connection refused")

    error = _fails(FakeTwilioApi(unreachable), lambda control: control.hang_up(CALL_SID))

    assert isinstance(error.__cause__, requests.ConnectionError)
    assert (error.status, error.code) == (None, None)


def test_hang_up_maps_a_success_whose_body_is_not_json() -> None:
    api = FakeTwilioApi(lambda _: Response(200, "not json"))

    error = _fails(api, lambda control: control.hang_up(CALL_SID))

    assert isinstance(error.__cause__, ValueError)


def test_hang_up_keeps_the_sdk_error_as_the_cause() -> None:
    api = FakeTwilioApi(lambda _: _error(400, 21220, "Call is not in-progress."))

    error = _fails(api, lambda control: control.hang_up(CALL_SID))

    assert error.__cause__ is not None


@pytest.mark.parametrize("call_sid", ["", "CA1/../../Messages", "CA1?x=1", "CA 1", "C"])
def test_hang_up_refuses_a_call_sid_that_could_alter_the_url(call_sid: str) -> None:
    api = FakeTwilioApi(lambda _: _call_resource("completed"))

    with pytest.raises(ValueError, match="CallSid"):
        _control(api).hang_up(call_sid)
    assert api.sent == []


# --- transfer ----------------------------------------------------------------------------


def test_transfer_replaces_the_twiml_with_a_dial() -> None:
    api = FakeTwilioApi(lambda _: _call_resource("in-progress"))

    _control(api).transfer(CALL_SID, "+15551234567")

    [sent] = api.sent
    assert sent.method == "POST"
    assert urlsplit(sent.url).path == CALL_PATH
    assert sent.data == {"Twiml": "<Response><Dial>+15551234567</Dial></Response>"}


def test_transfer_refuses_a_number_that_is_not_e164_before_calling_twilio() -> None:
    api = FakeTwilioApi(lambda _: _call_resource("in-progress"))

    with pytest.raises(ValueError, match=r"E\.164"):
        _control(api).transfer(CALL_SID, "555-1234")
    assert api.sent == []


def test_transfer_of_a_call_that_ended_fails() -> None:
    error = _fails(FakeTwilioApi(_not_found), lambda c: c.transfer(CALL_SID, "+15551234567"))

    assert (error.status, error.code) == (404, 20404)


def test_transfer_maps_an_api_error() -> None:
    api = FakeTwilioApi(lambda _: _error(400, 21220, "Call is not in-progress."))

    error = _fails(api, lambda c: c.transfer(CALL_SID, "+15551234567"))

    assert (error.status, error.code) == (400, 21220)


def test_transfer_maps_a_network_failure() -> None:
    def unreachable(_: SentRequest) -> Response:
        raise requests.Timeout("read timed out")

    error = _fails(FakeTwilioApi(unreachable), lambda c: c.transfer(CALL_SID, "+15551234567"))

    assert isinstance(error.__cause__, requests.Timeout)


# --- construction and async --------------------------------------------------------------


@pytest.mark.parametrize(("account_sid", "auth_token"), [("", AUTH_TOKEN), (ACCOUNT_SID, "")])
def test_call_control_refuses_missing_credentials(account_sid: str, auth_token: str) -> None:
    with pytest.raises(ValueError, match="account SID and auth token"):
        CallControl(account_sid, auth_token)


async def test_hang_up_async_runs_the_request_off_the_event_loop_thread() -> None:
    api = FakeTwilioApi(lambda _: _call_resource("completed"))

    await _control(api).hang_up_async(CALL_SID)

    [sent] = api.sent
    assert sent.data == {"Status": "completed"}
    assert sent.thread_id != threading.get_ident()


async def test_hang_up_async_raises_call_control_error() -> None:
    api = FakeTwilioApi(lambda _: _error(401, 20003, "Authenticate"))

    with pytest.raises(CallControlError):
        await _control(api).hang_up_async(CALL_SID)


async def test_transfer_async_sends_the_dial() -> None:
    api = FakeTwilioApi(lambda _: _call_resource("in-progress"))

    await _control(api).transfer_async(CALL_SID, "+15551234567")

    assert api.sent[0].data == {"Twiml": "<Response><Dial>+15551234567</Dial></Response>"}
    assert api.sent[0].thread_id != threading.get_ident()


def test_call_control_builds_its_own_http_client_without_touching_the_network() -> None:
    control = CallControl(ACCOUNT_SID, AUTH_TOKEN, timeout_s=2.5)

    assert isinstance(control, CallControl)
