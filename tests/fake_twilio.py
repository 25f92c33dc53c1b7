"""A fake of Twilio's REST API for calls: a real HTTP server speaking its shapes.

Only what offhook uses, as Twilio documents it:

- Create a call: `POST /2010-04-01/Accounts/{AccountSid}/Calls.json`, form-encoded `To`,
  `From`, `Url` (or `Twiml`), `Method`, `StatusCallback`, `StatusCallbackEvent` (repeated),
  `StatusCallbackMethod`, `MachineDetection`, `AsyncAmd`, `AsyncAmdStatusCallback`,
  `AsyncAmdStatusCallbackMethod`; answered `201 Created` with the Call resource as JSON,
  `status: "queued"`, `direction: "outbound-api"`.
  https://www.twilio.com/docs/voice/api/call-resource#create-a-call-resource
  https://www.twilio.com/docs/voice/answering-machine-detection (the AMD fields)
- Update a call: `POST /2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json` with
  `Status=completed|canceled`, or new `Twiml` / `Url`; `200 OK` with the Call resource.
  An unknown call is `404`, code 20404; new TwiML for a call that has ended is `400`,
  code 21220 ("Call is not in-progress. Cannot redirect").
  https://www.twilio.com/docs/voice/api/call-resource#update-a-call-resource
  https://www.twilio.com/docs/voice/tutorials/how-to-modify-calls-in-progress
- Authentication: HTTP basic auth, account SID and auth token; anything else is `401`,
  code 20003. https://www.twilio.com/docs/usage/requests-to-twilio
- Errors: a JSON body `{"code", "message", "more_info", "status"}`.
  https://www.twilio.com/docs/usage/twilios-response#response-formats-exceptions
  Codes: https://www.twilio.com/docs/api/errors/20003, /20404, /21201 (no To), /21213 (no
  From), /21205 (no or invalid Url), /21220.

The fake records every request (the form as Twilio received it, repeated fields as
lists) and keeps each call's state. It does not dial by itself: a test plays Twilio's
part of a new call with `dial` below (status callbacks, the voice webhook, the stream
through the simulator, the AMD callback), as Twilio would after `queued`.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ops.local_server import ServerThread, free_port
from ops.simulate import CallerTurn, CallReport, SimulationConfig, simulate_call
from telephony.security import sign

ACCOUNT_SID = "AC" + "0123456789abcdef" * 2
API_VERSION = "2010-04-01"
ENDED = {"completed", "canceled", "busy", "no-answer", "failed"}


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str
    form: dict[str, list[str]]
    authorized: bool

    def one(self, name: str) -> str | None:
        values = self.form.get(name)
        return values[0] if values else None


@dataclass
class FakeCall:
    sid: str
    to: str
    from_: str
    status: str
    direction: str
    form: dict[str, list[str]] = field(default_factory=dict)
    twiml: str | None = None  # the TwiML an update put in place (a transfer's <Dial>)

    def resource(self) -> dict[str, Any]:
        """The Call resource as the API answers it (trimmed to the documented basics)."""
        now = formatdate(usegmt=True)
        return {
            "sid": self.sid,
            "account_sid": ACCOUNT_SID,
            "api_version": API_VERSION,
            "to": self.to,
            "from": self.from_,
            "status": self.status,
            "direction": self.direction,
            "answered_by": None,
            "date_created": now,
            "date_updated": now,
            "start_time": None,
            "end_time": None,
            "duration": None,
            "price": None,
            "uri": f"/{API_VERSION}/Accounts/{ACCOUNT_SID}/Calls/{self.sid}.json",
        }


def _error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse(
        {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        },
        status_code=status,
    )


class FakeTwilio:
    """The fake API; `calls` by CallSid, `requests` in order. Thread-safe to read."""

    def __init__(self, auth_token: str, account_sid: str = ACCOUNT_SID) -> None:
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.calls: dict[str, FakeCall] = {}
        self.requests: list[ApiRequest] = []
        self.url = ""
        self._lock = threading.Lock()
        self._created: asyncio.Queue[FakeCall] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        base = f"/{API_VERSION}/Accounts/{{account}}/Calls"
        self.app = Starlette(
            routes=[
                Route(base + ".json", self._create, methods=["POST"]),
                Route(base + "/{call_sid}.json", self._update, methods=["POST"]),
            ]
        )

    def add_live_call(self, sid: str, *, direction: str = "inbound") -> FakeCall:
        """A call Twilio is carrying (an inbound caller), so updates can find it."""
        call = FakeCall(sid, "+15550199", "+15550100", "in-progress", direction)
        with self._lock:
            self.calls[sid] = call
        return call

    def updates(self, sid: str) -> list[ApiRequest]:
        path = f"/{API_VERSION}/Accounts/{self.account_sid}/Calls/{sid}.json"
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def creates(self) -> list[ApiRequest]:
        path = f"/{API_VERSION}/Accounts/{self.account_sid}/Calls.json"
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # --- the API -----------------------------------------------------------------------

    async def _read(self, request: Request) -> tuple[ApiRequest, bool]:
        form = await request.form()
        fields = {key: [str(v) for v in form.getlist(key)] for key in form}
        authorized = self._authorized(request.headers.get("authorization", ""))
        account = request.path_params["account"]
        sent = ApiRequest(request.method, request.url.path, fields, authorized)
        with self._lock:
            self.requests.append(sent)
        return sent, authorized and account == self.account_sid

    def _authorized(self, header: str) -> bool:
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(encoded).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return secrets.compare_digest(f"{user}:{password}", f"{self.account_sid}:{self.auth_token}")

    async def _create(self, request: Request) -> Response:
        sent, ok = await self._read(request)
        if not ok:
            return _error(401, 20003, "Authenticate")
        to, from_ = sent.one("To"), sent.one("From")
        if not to:
            return _error(400, 21201, "No 'To' number is specified")
        if not from_:
            return _error(400, 21213, "No 'From' number is specified")
        url = sent.one("Url")
        if not sent.one("Twiml") and not (url and url.startswith(("http://", "https://"))):
            return _error(400, 21205, f"Url is not a valid URL: {url}")
        call = FakeCall("CA" + secrets.token_hex(16), to, from_, "queued", "outbound-api")
        call.form = sent.form
        with self._lock:
            self.calls[call.sid] = call
        if self._created is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._created.put_nowait, call)
        return JSONResponse(call.resource(), status_code=201)

    async def _update(self, request: Request) -> Response:
        sent, ok = await self._read(request)
        if not ok:
            return _error(401, 20003, "Authenticate")
        sid = request.path_params["call_sid"]
        with self._lock:
            call = self.calls.get(sid)
        if call is None:
            path = request.url.path
            return _error(404, 20404, f"The requested resource {path} was not found")
        status, twiml = sent.one("Status"), sent.one("Twiml")
        if status is not None:
            if status not in ("completed", "canceled"):
                return _error(400, 21218, f"Invalid Status: {status}")
            if call.status not in ENDED:
                call.status = "completed"
        elif twiml is not None or sent.one("Url") is not None:
            if call.status in ENDED:
                return _error(400, 21220, "Call is not in-progress. Cannot redirect.")
            call.twiml = twiml
        return JSONResponse(call.resource())

    # --- running it ----------------------------------------------------------------------

    def serve(self, servers: ServerThread) -> str:
        self.url = servers.serve(self.app, free_port())
        return self.url

    def watch_creates(self) -> asyncio.Queue[FakeCall]:
        """Calls created from now on arrive in this queue, on the caller's event loop."""
        self._loop = asyncio.get_running_loop()
        self._created = asyncio.Queue()
        return self._created


async def post_callback(
    url: str, params: Mapping[str, str], auth_token: str | None
) -> httpx.Response:
    """A webhook as Twilio posts it: form-encoded, signed over the URL and parameters."""
    headers = {"User-Agent": "TwilioProxy/1.1"}
    if auth_token:
        headers["X-Twilio-Signature"] = sign(auth_token, url, params)
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(url, data=dict(params), headers=headers)


def callback_params(call: FakeCall, **extra: str) -> dict[str, str]:
    """The common parameters of Twilio's call webhooks."""
    return {
        "CallSid": call.sid,
        "AccountSid": ACCOUNT_SID,
        "From": call.from_,
        "To": call.to,
        "Direction": call.direction,
        "ApiVersion": API_VERSION,
        **extra,
    }


# --- Twilio's part of a call it dials --------------------------------------------------


@dataclass
class Dialed:
    """What happened when the fake dialed a created call (times on the call clock)."""

    report: CallReport
    amd_at_ms: float | None = None
    statuses: list[str] = field(default_factory=list)


async def dial(
    call: FakeCall,
    base_url: str,
    auth_token: str,
    callee: list[CallerTurn],
    *,
    answered_by: str,
    amd_after: tuple[int, int],
    **options: Any,
) -> Dialed:
    """Play Twilio for a call created through the fake API, as the Call resource and AMD
    pages describe: status callbacks `initiated`, `ringing`, `in-progress` (answered)
    to `StatusCallback`, then the voice `Url` (POST, `Direction=outbound-api`) and the
    stream with the callee's side (`callee`, through the simulator), then `AnsweredBy`
    to `AsyncAmdStatusCallback` `amd_after[1]` ms after callee turn `amd_after[0]`
    starts (DetectMessageEnd: a machine's verdict comes at its beep's end), and
    `completed` with `CallDuration` once the stream is over."""
    status_url = call.form.get("StatusCallback", [""])[0]
    amd_url = call.form.get("AsyncAmdStatusCallback", [""])[0]
    dialed = Dialed(report=CallReport("", "", ""))
    posts: list[asyncio.Task[httpx.Response]] = []

    async def status(value: str, **extra: str) -> None:
        if status_url:
            params = callback_params(call, CallStatus=value, **extra)
            (await post_callback(status_url, params, auth_token)).raise_for_status()
            dialed.statuses.append(value)

    def turn_started(index: int, at_ms: float) -> None:
        turn, delay_ms = amd_after
        if index != turn or not amd_url:
            return
        dialed.amd_at_ms = at_ms + delay_ms
        params = callback_params(
            call, AnsweredBy=answered_by, MachineDetectionDuration=str(round(at_ms + delay_ms))
        )
        loop = asyncio.get_running_loop()
        loop.call_later(
            delay_ms / 1000,
            lambda: posts.append(loop.create_task(post_callback(amd_url, params, auth_token))),
        )

    for value in ("initiated", "ringing", "in-progress"):
        await status(value)
    call.status = "in-progress"
    config = SimulationConfig(
        base_url=base_url,
        auth_token=auth_token,
        turns=callee,
        voice_url=call.form["Url"][0],
        direction="outbound-api",
        call_sid=call.sid,
        account_sid=ACCOUNT_SID,
        from_number=call.from_,
        to_number=call.to,
        on_turn_start=turn_started,
        **options,
    )
    dialed.report = await simulate_call(config)
    for task in posts:
        (await task).raise_for_status()
    if call.status not in ENDED:
        call.status = "completed"
    duration = round(len(dialed.report.caller_audio) / 8000)
    await status("completed", CallDuration=str(duration))
    return dialed
