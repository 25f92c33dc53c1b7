"""Outbound calls: placed over Twilio's REST API, answered by the same /twilio/voice flow.

A call is created with `Url` = our voice webhook plus `?outbound=1&amd=1&greeting=...`
(Twilio signs the URL with its query, so the greeting cannot be forged), a status
callback for every progress event, and asynchronous answering-machine detection with
`DetectMessageEnd`: the call connects at once, and Twilio posts `AnsweredBy` when it
knows — for a machine, after its greeting's beep
(https://www.twilio.com/docs/voice/answering-machine-detection). Until then the bot
listens and says nothing; then it greets a person, or leaves VOICEMAIL_MESSAGE.

`offhook call` and `POST /calls` (bearer CALLS_API_TOKEN) both go through `place_call`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from app.call_owners import EarlyReport
from app.call_resume import RESUME, resume_number
from app.call_status import deliver_early_status, status_from_report
from app.callback_routing import forward, holder_elsewhere
from app.control import rest_client
from app.paths import AMD_PATH, CALL_STATUS_PATH, VOICE_PATH
from app.settings import Settings
from app.webhook import (
    Refused,
    WebhookForm,
    account_sid,
    base_url,
    call_sid,
    check_length,
    read_body,
    signed_form,
)
from telephony.control import OutboundCall
from telephony.errors import CallControlError
from telephony.security import public_url
from telephony.twiml import MAX_PARAMETER_CHARS, is_transfer_target

if TYPE_CHECKING:
    from app.call import CallSession
    from app.services import Services

log = logging.getLogger(__name__)

# The greeting travels as a stream <Parameter> (name + value under 500 characters).
MAX_GREETING_CHARS = MAX_PARAMETER_CHARS - len("greeting") - 1
# `POST /calls` takes {"to", "from", "greeting"}: a few hundred bytes.
MAX_CALLS_BODY_BYTES = 4096
JSON_TYPE = "application/json"
# AMD verdicts kept for calls whose stream has not started yet (oldest dropped first).
MAX_EARLY_AMD = 1000


class OutboundError(ValueError):
    """An outbound call that cannot be placed as asked (the message says why)."""


def voice_url(base: str, greeting: str) -> str:
    """The voice webhook for a call we place: marked outbound, with AMD and its greeting."""
    query = urlencode({"outbound": "1", "amd": "1", "greeting": greeting})
    return f"{public_url(base, VOICE_PATH)}?{query}"


def stream_parameters(request: Request, form: WebhookForm) -> dict[str, str]:
    """What the voice webhook passes on to the stream about the call's direction and,
    for a call we placed (signed URL), its greeting and AMD; for a resumed call, which
    resume it is. A stream may start on any gateway: all it needs is in these."""
    direction = form.get("Direction")[:32]
    parameters = {"direction": direction if direction.isprintable() else ""}
    query = request.query_params
    if query.get("outbound") == "1":
        parameters["amd"] = "1" if query.get("amd") == "1" else ""
        parameters["greeting"] = query.get("greeting", "")[:MAX_GREETING_CHARS]
    if resume := resume_number(query.get(RESUME, "")):
        # A resumed call (app.call_resume): its stream's token is keyed on this.
        parameters[RESUME] = str(resume)
    return parameters


def place_call(settings: Settings, base: str, to: str, from_: str = "", greeting: str = "") -> str:
    """Place an outbound call; returns its CallSid. Raises OutboundError or
    CallControlError (Twilio refused it)."""
    rest = rest_client(settings)
    if rest is None:
        raise OutboundError("outbound calls need TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN")
    caller_id = from_ or settings.outbound_from
    if not caller_id:
        raise OutboundError("no caller ID: pass a from number or set OUTBOUND_FROM")
    for label, number in (("to", to), ("from", caller_id)):
        if not number.startswith("+") or not is_transfer_target(number):
            raise OutboundError(
                f"expected an E.164 {label} number like +15551234567, got {number!r}"
            )
    greeting = greeting or settings.outbound_greeting
    if len(greeting) > MAX_GREETING_CHARS:
        raise OutboundError(f"the greeting is over {MAX_GREETING_CHARS} characters")
    call_sid = rest.place_call(
        OutboundCall(
            to=to,
            from_=caller_id,
            url=voice_url(base, greeting),
            status_callback=public_url(base, CALL_STATUS_PATH),
            amd_callback=public_url(base, AMD_PATH),
        )
    )
    log.info("placed call %s to %s from %s", call_sid, to, caller_id)
    return call_sid


# --- HTTP endpoints -------------------------------------------------------------------


def _services(conn: HTTPConnection) -> Services:
    services: Services = conn.app.state.services
    return services


def _bearer_ok(request: Request, token: str) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip(), token)


async def calls_endpoint(request: Request) -> Response:
    """`POST /calls` {"to", "from"?, "greeting"?}: place an outbound call."""
    services = _services(request)
    settings = services.settings
    if not settings.calls_api_token:
        return JSONResponse({"error": "POST /calls is off: CALLS_API_TOKEN is not set"}, 403)
    if not _bearer_ok(request, settings.calls_api_token):
        services.refusals.warning(
            "calls token", "POST /calls: missing or wrong bearer token from %s", request.client
        )
        return JSONResponse(
            {"error": "a valid bearer token is required"},
            401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        body = await _json_body(request)
    except Refused as exc:
        return JSONResponse({"error": exc.reason}, exc.status)
    if not isinstance(body, dict) or not isinstance(body.get("to"), str):
        return JSONResponse({"error": 'expected {"to": "+15551234567", ...}'}, 400)
    fields = {k: body.get(k, "") for k in ("from", "greeting")}
    if not all(isinstance(v, str) for v in fields.values()):
        return JSONResponse({"error": "from and greeting must be strings"}, 400)
    try:
        call_sid = await asyncio.to_thread(
            place_call,
            settings,
            base_url(request, settings),
            body["to"],
            fields["from"],
            fields["greeting"],
        )
    except OutboundError as exc:
        return JSONResponse({"error": str(exc)}, 400)
    except CallControlError as exc:
        return JSONResponse({"error": str(exc), "twilio_code": exc.code}, 502)
    return JSONResponse({"call_sid": call_sid, "to": body["to"]}, 201)


async def _json_body(request: Request) -> object:
    """The request's JSON, read within bounds; else Refused (415, 400, 413, 408)."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() != JSON_TYPE:
        raise Refused(415, f"expected {JSON_TYPE}")
    check_length(request, MAX_CALLS_BODY_BYTES)
    body = await read_body(request, MAX_CALLS_BODY_BYTES)
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "expected a JSON body") from None


async def amd_callback(request: Request) -> Response:
    """Twilio's AsyncAmdStatusCallback: `AnsweredBy` for an outbound call."""
    services = _services(request)
    try:
        form = await signed_form(request, services, AMD_PATH)
        sid = call_sid(form)
        account_sid(form, services.settings.twilio_account_sid)
    except Refused as exc:
        return PlainTextResponse(exc.reason, status_code=exc.status)
    answered_by = form.get("AnsweredBy")[:32] or "unknown"
    if not answered_by.isprintable():
        return PlainTextResponse("AnsweredBy holds control characters", status_code=400)
    duration = form.get("MachineDetectionDuration")
    detection_ms = int(duration) if duration.isascii() and duration.isdigit() else None
    # %r: the sender's string; a newline must not forge a log line.
    log.info("call %s answered by %r", sid, answered_by)
    session = services.calls.get(sid)
    if session is not None:
        session.amd_result(answered_by, detection_ms)
        return Response(status_code=204)
    holder = await holder_elsewhere(services, request, sid)
    if holder is not None:
        answer = await forward(services, request, form, AMD_PATH, holder)
        if answer is not None:
            return answer
    # The verdict can beat the stream's start, which may come on any gateway.
    report = {"kind": "amd", "answered_by": answered_by, "detection_ms": detection_ms}
    if not await services.call_owners.keep_early(sid, report):
        services.early_amd[sid] = (answered_by, detection_ms)
        while len(services.early_amd) > MAX_EARLY_AMD:  # calls whose stream never came
            del services.early_amd[next(iter(services.early_amd))]
    return Response(status_code=204)


def deliver_early(services: Services, session: CallSession) -> None:
    """Hand a new call what Twilio told us about it before its stream started (what
    this gateway kept itself; `deliver_kept` hands it what the call owners kept)."""
    early = services.early_amd.pop(session.call_sid, None)
    if early is not None:
        session.amd_result(*early)
    deliver_early_status(services, session)


async def deliver_kept(services: Services, session: CallSession) -> None:
    """Hand a new call the reports kept for it, by this gateway or another."""
    deliver_reports(session, await services.call_owners.take_early(session.call_sid))


def deliver_reports(session: CallSession, reports: list[EarlyReport]) -> None:
    """Kept answering-machine verdicts and statuses, each at the time it came."""
    now = time.time()
    for report in reports:
        if report.get("kind") == "amd":
            detection = report.get("detection_ms")
            answered_by = str(report.get("answered_by") or "unknown")[:32]
            session.amd_result(answered_by, detection if isinstance(detection, int) else None)
        elif (status := status_from_report(report)) is not None:
            at, event = status
            session.record_event(event, t_ms=session.now() / 8 + (at - now) * 1000)
