"""Two gateways behind one public URL, on a real redis-server: a callback or a resume
webhook that lands on the gateway not holding the call is handled as the holder would.

The gateways are real uvicorn servers sharing PUBLIC_URL, REDIS_URL and the auth token,
and every request is signed over the public URL as Twilio signs it. The call held by
gateway A is a stand-in session (no models, no audio): what is checked is where Twilio's
reports about it end up, and what TwiML a resume gets.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest
from twilio.request_validator import RequestValidator

from app.main import create_app
from app.services import Services
from callevents import CallEvent, CallStatus
from ops.local_server import ServerThread, free_port
from tests.conftest import AUTH_TOKEN
from tests.conftest import test_settings as gateway_settings

pytestmark = pytest.mark.timeout(60)

PUBLIC = "https://bot.example.com"
ACCOUNT = "AC" + "0" * 32


@dataclass
class StandInCall:
    """What the callbacks touch of a live call: its record and its AMD verdict."""

    call_sid: str
    events: list[CallEvent] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    recorder: Any = field(default_factory=lambda: SimpleNamespace(accepting=True, closed=False))

    def record_event(self, event: CallEvent, *, t_ms: float | None = None) -> None:
        self.events.append(event)

    def amd_result(self, answered_by: str, detection_ms: int | None) -> None:
        self.verdicts.append(answered_by)

    def now(self) -> int:
        return 0


@dataclass
class Gateway:
    url: str
    services: Services


def start_gateway(servers: ServerThread, redis_url: str) -> Gateway:
    port = free_port()
    settings = gateway_settings(
        twilio_auth_token=AUTH_TOKEN,
        public_url=PUBLIC,
        redis_url=redis_url,
        gateway_url=f"http://127.0.0.1:{port}",
        data_dir=tempfile.mkdtemp(prefix="offhook-test-routing-"),
    )
    # Callbacks and webhooks need no models: a stand-in whose LLM is always ready.
    app = create_app(settings, models=SimpleNamespace(llm_health=None))  # type: ignore[arg-type]
    url = servers.serve(app, port)
    return Gateway(url=url, services=app.state.services)


@pytest.fixture(scope="module")
def gateways(servers: ServerThread, redis_url: str) -> Iterator[tuple[Gateway, Gateway]]:
    yield start_gateway(servers, redis_url), start_gateway(servers, redis_url)


def new_call_sid() -> str:
    return "CA" + secrets.token_hex(16)


async def post_signed(gateway: Gateway, path: str, fields: dict[str, str]) -> httpx.Response:
    """POST as Twilio does: to the public URL's path, signed over the public URL."""
    signature = RequestValidator(AUTH_TOKEN).compute_signature(PUBLIC + path, fields)
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(
            gateway.url + path.split("?")[0],
            params=dict(httpx.URL(path).params),
            data=fields,
            headers={"X-Twilio-Signature": signature},
        )


def call_fields(call_sid: str, **more: str) -> dict[str, str]:
    return {
        "CallSid": call_sid,
        "AccountSid": ACCOUNT,
        "From": "+15550001111",
        "To": "+15550002222",
        "Direction": "outbound-api",
        **more,
    }


def hold_on(servers: ServerThread, gateway: Gateway, call: StandInCall) -> None:
    gateway.services.calls[call.call_sid] = call  # type: ignore[assignment]
    servers.run(gateway.services.call_owners.hold(call.call_sid))


def release_on(servers: ServerThread, gateway: Gateway, call_sid: str, *, resumable: bool) -> None:
    gateway.services.calls.pop(call_sid, None)
    servers.run(gateway.services.call_owners.release(call_sid, resumable=resumable))


async def test_a_status_callback_landing_on_the_other_gateway_reaches_the_call(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    a, b = gateways
    call = StandInCall(new_call_sid())
    hold_on(servers, a, call)
    answer = await post_signed(
        b, "/twilio/call-status", call_fields(call.call_sid, CallStatus="in-progress")
    )
    assert answer.status_code == 204
    assert [e.status for e in call.events if isinstance(e, CallStatus)] == ["in-progress"]


async def test_an_amd_verdict_landing_on_the_other_gateway_reaches_the_call(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    a, b = gateways
    call = StandInCall(new_call_sid())
    hold_on(servers, a, call)
    answer = await post_signed(
        b, "/twilio/amd", call_fields(call.call_sid, AnsweredBy="machine_end_beep")
    )
    assert answer.status_code == 204
    assert call.verdicts == ["machine_end_beep"]


async def test_a_forged_callback_is_refused_by_the_holder_too(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    a, b = gateways
    call = StandInCall(new_call_sid())
    hold_on(servers, a, call)
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(
            b.url + "/twilio/amd",
            data=call_fields(call.call_sid, AnsweredBy="human"),
            headers={"X-Twilio-Signature": "forged", "X-Offhook-Forwarded-By": a.url},
        )
    assert answer.status_code == 403
    assert call.verdicts == []


async def test_a_verdict_before_the_stream_waits_for_it_on_whichever_gateway_it_starts(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    a, b = gateways
    call_sid = new_call_sid()
    answer = await post_signed(a, "/twilio/amd", call_fields(call_sid, AnsweredBy="human"))
    assert answer.status_code == 204
    assert call_sid not in a.services.early_amd  # kept for every gateway, not A alone
    kept = servers.run(b.services.call_owners.take_early(call_sid))
    assert [r["answered_by"] for r in kept] == ["human"]
    assert servers.run(a.services.call_owners.take_early(call_sid)) == []  # taken once


def leave_dead_holder(servers: ServerThread, gateway: Gateway, call_sid: str) -> None:
    """A live holder record left by a gateway that died: nobody answers at its address."""
    key = f"offhook:{{{call_sid}}}:holder"
    value = f'{{"gateway": "http://127.0.0.1:{free_port()}", "live": true}}'
    client = gateway.services.call_owners.client  # type: ignore[attr-defined]
    servers.run(client.set(key, value, ex=30))


async def test_a_callback_for_a_gateway_that_died_is_handled_where_it_lands(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    _, b = gateways
    call_sid = new_call_sid()
    leave_dead_holder(servers, b, call_sid)
    answer = await post_signed(b, "/twilio/amd", call_fields(call_sid, AnsweredBy="human"))
    assert answer.status_code == 204
    kept = servers.run(b.services.call_owners.take_early(call_sid))
    assert [r["answered_by"] for r in kept] == ["human"]


# --- resuming a call whose stream was lost ------------------------------------------------


def stream_of(twiml: str) -> tuple[dict[str, str], list[str], str | None]:
    """(the stream's parameters, the verbs after </Connect>, the Redirect URL)."""
    root = ElementTree.fromstring(twiml)
    parameters = {p.get("name", ""): p.get("value", "") for p in root.iter("Parameter")}
    verbs = [verb.tag for verb in root]
    after = verbs[verbs.index("Connect") + 1 :] if "Connect" in verbs else verbs
    redirect = root.find("Redirect")
    return parameters, after, redirect.text if redirect is not None else None


async def test_a_first_stream_is_followed_by_a_redirect_that_resumes_it(
    gateways: tuple[Gateway, Gateway],
) -> None:
    _, b = gateways
    answer = await post_signed(b, "/twilio/voice", call_fields(new_call_sid()))
    parameters, after, redirect = stream_of(answer.text)
    assert after == ["Redirect"]
    assert redirect is not None and redirect.startswith(PUBLIC + "/twilio/voice?")
    assert "resume=1" in redirect and "resume" not in parameters


async def test_a_call_whose_gateway_died_resumes_on_the_other_with_an_apology(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    _, b = gateways
    call = StandInCall(new_call_sid())
    # A died: its record still says live, but nobody answers at its address.
    leave_dead_holder(servers, b, call.call_sid)
    answer = await post_signed(b, "/twilio/voice?resume=1", call_fields(call.call_sid))
    root = ElementTree.fromstring(answer.text)
    assert [verb.tag for verb in root] == ["Say", "Connect", "Redirect"]
    assert "cut off" in (root.findtext("Say") or "")
    parameters, _, redirect = stream_of(answer.text)
    assert parameters["resume"] == "1"
    assert b.services.tokens.verify(f"{call.call_sid}:resume:1", parameters["token"])
    assert not b.services.tokens.verify(call.call_sid, parameters["token"])
    assert redirect is not None and "resume=2" in redirect
    # The last resume allowed hangs up after its stream.
    answer = await post_signed(b, "/twilio/voice?resume=2", call_fields(call.call_sid))
    _, after, redirect = stream_of(answer.text)
    assert after == ["Hangup"] and redirect is None


async def test_a_resume_webhook_replayed_after_its_stream_started_gets_no_second_stream(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    a, b = gateways
    call_sid = new_call_sid()
    first = await post_signed(a, "/twilio/voice?resume=1", call_fields(call_sid))
    assert "<Connect>" in first.text
    # Its stream starts (on A): the resume's key is claimed, in Redis for every gateway.
    assert servers.run(a.services.admission.claim_stream(f"{call_sid}:resume:1"))
    again = await post_signed(b, "/twilio/voice?resume=1", call_fields(call_sid))
    assert "<Connect>" not in again.text


async def test_a_call_ended_on_purpose_is_not_resumed_on_any_gateway(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    a, b = gateways
    call = StandInCall(new_call_sid())
    hold_on(servers, a, call)
    release_on(servers, a, call.call_sid, resumable=False)  # a farewell, a limit, ...
    for gateway in (a, b):
        answer = await post_signed(gateway, "/twilio/voice?resume=1", call_fields(call.call_sid))
        root = ElementTree.fromstring(answer.text)
        assert [verb.tag for verb in root] == ["Hangup"], gateway.url


async def test_a_resume_while_the_holder_still_lives_is_decided_by_the_holder(
    servers: ServerThread, gateways: tuple[Gateway, Gateway]
) -> None:
    a, b = gateways
    call = StandInCall(new_call_sid())
    hold_on(servers, a, call)

    async def end_on_purpose_soon() -> None:
        await asyncio.sleep(0.3)  # the session is still closing when the resume comes
        a.services.calls.pop(call.call_sid, None)
        await a.services.call_owners.release(call.call_sid, resumable=False)

    closing = asyncio.run_coroutine_threadsafe(end_on_purpose_soon(), servers.loop)
    answer = await post_signed(b, "/twilio/voice?resume=1", call_fields(call.call_sid))
    closing.result(5)
    assert [verb.tag for verb in ElementTree.fromstring(answer.text)] == ["Hangup"]


async def test_a_forged_resume_count_fails_the_signature(gateways: tuple[Gateway, Gateway]) -> None:
    _, b = gateways
    fields = call_fields(new_call_sid())
    signature = RequestValidator(AUTH_TOKEN).compute_signature(
        PUBLIC + "/twilio/voice?resume=1", fields
    )
    async with httpx.AsyncClient(timeout=10) as client:
        answer = await client.post(
            b.url + "/twilio/voice",
            params={"resume": "2"},
            data=fields,
            headers={"X-Twilio-Signature": signature},
        )
    assert answer.status_code == 403
