"""Twilio's call status callbacks, written to the call's timeline.

An outbound call reports `initiated`, `ringing`, `in-progress` (answered) and
`completed`, or ends `busy`, `no-answer`, `failed` or `canceled` without ever connecting
(https://www.twilio.com/docs/voice/api/call-resource#statuscallbackevent,
https://support.twilio.com/hc/en-us/articles/223132267). Where each lands depends on
the call's record: a call still streaming records it on its own clock; one whose record
is closed gets it appended at its end; one whose stream has not started yet keeps it
until it does (on the call clock, before 0); one that never connects gets a record of
its own, ended with its status.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from app.call_owners import EarlyReport
from app.callback_routing import forward, holder_elsewhere
from app.paths import CALL_STATUS_PATH
from app.webhook import Refused, account_sid, call_sid, party, signed_form
from callevents import CallStatus
from recordings.errors import RecordError
from recordings.late import append_late_event
from recordings.recorder import CallRecorder

if TYPE_CHECKING:
    from app.call import CallSession
    from app.services import Services

log = logging.getLogger(__name__)

NEVER_CONNECTED = ("busy", "no-answer", "failed", "canceled")
_CLOSE_WAIT_S = 10.0
MAX_EARLY = 1000  # calls with statuses kept for a stream still to start


# Twilio's CallStatus values; anything else is not a status we record.
STATUSES = frozenset(
    ("queued", "initiated", "ringing", "in-progress", "completed", *NEVER_CONNECTED)
)


async def call_status_callback(request: Request) -> Response:
    services: Services = request.app.state.services
    try:
        form = await signed_form(request, services, CALL_STATUS_PATH)
        sid = call_sid(form)
        account_sid(form, services.settings.twilio_account_sid)
        peer = {"to": party(form, "To"), "from": party(form, "From")}
    except Refused as exc:
        return PlainTextResponse(exc.reason, status_code=exc.status)
    status = form.get("CallStatus")
    if status not in STATUSES:
        return PlainTextResponse("unknown CallStatus", status_code=400)
    duration = form.get("CallDuration")
    sip_code = form.get("SipResponseCode")
    event = CallStatus(
        status=status,
        duration_s=int(duration) if duration.isascii() and duration.isdigit() else 0,
        sip_code=sip_code if sip_code.isascii() and sip_code.isdigit() else "",
    )
    if sid not in services.calls:
        holder = await holder_elsewhere(services, request, sid)
        if holder is not None:
            answer = await forward(services, request, form, CALL_STATUS_PATH, holder)
            if answer is not None:
                return answer
    log.info("call %s status: %s", sid, event.status)
    await _record(services, sid, event, peer)
    return Response(status_code=204)


def status_report(event: CallStatus) -> EarlyReport:
    """A status kept for the call's stream, which may start on another gateway."""
    return {"kind": "status", "at": time.time(), **event.data()}


def status_from_report(report: EarlyReport) -> tuple[float, CallStatus] | None:
    """(wall-clock time it came, the status) of a kept report; None if not a status."""
    if report.get("kind") != "status":
        return None
    try:
        event = CallStatus(
            status=str(report["status"]),
            duration_s=int(report.get("duration_s") or 0),
            sip_code=str(report.get("sip_code") or ""),
        )
        return float(report["at"]), event
    except (KeyError, TypeError, ValueError):
        return None


async def _record(
    services: Services, call_sid: str, event: CallStatus, peer: dict[str, str]
) -> None:
    settings = services.settings
    if not settings.recording:
        return
    session = services.calls.get(call_sid)
    if session is not None and session.recorder is not None:
        recorder = session.recorder
        if recorder.accepting:
            session.record_event(event)
            return
        for _ in range(int(_CLOSE_WAIT_S / 0.05)):  # the call is closing its record
            if recorder.closed:
                break
            await asyncio.sleep(0.05)
    try:
        if await asyncio.to_thread(
            append_late_event, settings.calls_dir, call_sid, event.name, event.data()
        ):
            services.record_closed(call_sid)  # its timeline changed: upload it again
            return
    except (OSError, RecordError, ValueError) as exc:
        log.warning("call %s: status %s not recorded: %s", call_sid, event.status, exc)
        return
    if session is not None:
        return  # its record could not be opened: nothing to add to
    if event.status in NEVER_CONNECTED:
        # Its stream will never start: what was kept for it (on any gateway) and this
        # status make its record, here.
        reports = await services.call_owners.take_early(call_sid)
        kept = [status for r in reports if (status := status_from_report(r)) is not None]
        now, wall = time.monotonic(), time.time()
        early = [(now - (wall - at), e) for at, e in kept]
        early += services.early_status.pop(call_sid, [])
        early.sort(key=lambda item: item[0])
        await _record_unconnected(services, call_sid, [*early, (now, event)], peer)
        return
    # Kept for the stream to come, which may start on any gateway; else kept here.
    if await services.call_owners.keep_early(call_sid, status_report(event)):
        return
    early = services.early_status.setdefault(call_sid, [])
    early.append((time.monotonic(), event))
    while len(services.early_status) > MAX_EARLY:  # calls whose stream never came
        del services.early_status[next(iter(services.early_status))]


def deliver_early_status(services: Services, session: CallSession) -> None:
    """Statuses that came before the stream started, placed before its clock's 0."""
    now = time.monotonic()
    for at, event in services.early_status.pop(session.call_sid, []):
        session.record_event(event, t_ms=(at - now) * 1000)


async def _record_unconnected(
    services: Services,
    call_sid: str,
    statuses: list[tuple[float, CallStatus]],
    peer: dict[str, str],
) -> None:
    """A record for an outbound call that was never answered: just its statuses."""
    settings = services.settings
    meta = {
        "call_sid": call_sid,
        "to": services.shown_number(peer["to"]),
        "from": peer["from"],
        "direction": "outbound",
    }
    services.open_records.add(call_sid)
    try:
        recorder = await asyncio.to_thread(CallRecorder, settings.calls_dir, call_sid, meta=meta)
        first = statuses[0][0]
        for at, event in statuses:
            recorder.event((at - first) * 1000, event.name, **event.data())
        await asyncio.to_thread(
            recorder.close, ended_with=statuses[-1][1].status, transcript={"turns": []}
        )
    except (OSError, RecordError, ValueError) as exc:
        log.warning("call %s: its status record could not be written: %s", call_sid, exc)
    finally:
        services.open_records.discard(call_sid)
        services.record_closed(call_sid)
