"""CallControl over real HTTP against the fake Twilio REST server (tests/fake_twilio.py):
the requests Twilio's API receives, and how its answers map to results and errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ops.local_server import ServerThread
from telephony.control import STATUS_EVENTS, CallControl, OutboundCall
from telephony.errors import CallControlError
from tests.fake_twilio import FakeTwilio

AUTH_TOKEN = "rest-auth-token-for-tests"
CALL = OutboundCall(
    to="+15551234567",
    from_="+15550100",
    url="https://bot.example.com/twilio/voice?outbound=1",
    status_callback="https://bot.example.com/twilio/call-status",
    amd_callback="https://bot.example.com/twilio/amd",
)


@pytest.fixture
def twilio(servers: ServerThread) -> Iterator[FakeTwilio]:
    fake = FakeTwilio(AUTH_TOKEN)
    fake.serve(servers)
    yield fake


def control(twilio: FakeTwilio, token: str = AUTH_TOKEN) -> CallControl:
    return CallControl(twilio.account_sid, token, api_base=twilio.url, timeout_s=5)


def test_place_call_creates_the_call_with_status_callbacks_and_async_amd(
    twilio: FakeTwilio,
) -> None:
    call_sid = control(twilio).place_call(CALL)

    [create] = twilio.creates()
    assert create.authorized and twilio.calls[call_sid].status == "queued"
    assert create.form == {
        "To": [CALL.to],
        "From": [CALL.from_],
        "Url": [CALL.url],
        "Method": ["POST"],
        "StatusCallback": [CALL.status_callback],
        "StatusCallbackMethod": ["POST"],
        "StatusCallbackEvent": list(STATUS_EVENTS),
        "MachineDetection": ["DetectMessageEnd"],
        "AsyncAmd": ["true"],
        "AsyncAmdStatusCallback": [CALL.amd_callback],
        "AsyncAmdStatusCallbackMethod": ["POST"],
    }


def test_place_call_without_amd_asks_for_none(twilio: FakeTwilio) -> None:
    control(twilio).place_call(OutboundCall(to=CALL.to, from_=CALL.from_, url=CALL.url))

    [create] = twilio.creates()
    assert set(create.form) == {"To", "From", "Url", "Method"}


def test_a_wrong_auth_token_is_a_call_control_error_with_twilio_code(
    twilio: FakeTwilio,
) -> None:
    with pytest.raises(CallControlError) as caught:
        control(twilio, token="wrong").place_call(CALL)

    assert (caught.value.status, caught.value.code) == (401, 20003)


def test_hang_up_completes_a_live_call_and_treats_an_unknown_one_as_ended(
    twilio: FakeTwilio,
) -> None:
    live = twilio.add_live_call("CA" + "a" * 32)

    control(twilio).hang_up(live.sid)
    control(twilio).hang_up("CA" + "b" * 32)  # 404, code 20404: already over

    assert live.status == "completed"
    assert [u.form for u in twilio.updates(live.sid)] == [{"Status": ["completed"]}]


def test_transfer_of_an_ended_call_is_refused_by_twilio(twilio: FakeTwilio) -> None:
    ended = twilio.add_live_call("CA" + "c" * 32)
    ended.status = "completed"

    with pytest.raises(CallControlError) as caught:
        control(twilio).transfer(ended.sid, "+15557654321")

    assert (caught.value.status, caught.value.code) == (400, 21220)
