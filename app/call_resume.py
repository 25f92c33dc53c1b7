"""A call whose gateway dies mid-call goes on, on a surviving gateway.

Twilio runs the TwiML after `</Connect>` once the stream's WebSocket closes, whoever
closed it ("the next TwiML instruction": twilio.com/docs/voice/twiml/stream and
twilio.com/docs/voice/twiml/connect). offhook puts a `<Redirect>` there, back to the
voice webhook through PUBLIC_URL with `resume=N` in its query. Twilio signs that URL
with its query, so N cannot be forged, and the webhook is checked like any other. The
resumed call gets a new stream with a fresh single-use token under its own admission key
(`CallSid:resume:N`), so it passes one-stream-per-CallSid without weakening it, and it
counts against admission like any new stream.

Not every closed stream may be resumed. The gateway that ends a call on purpose says so
before it closes the stream (`CallOwners.release(resumable=False)`): a farewell, the
voicemail, MAX_CALL_S, a silent line, a flood, an error. The bot's own hang-up and
transfers go over Twilio's REST API where credentials exist, which ends the call or
replaces its TwiML, so the `<Redirect>` never runs. Only a stream that dropped under a
live gateway, or a gateway that died (its holder record is left "live" and it answers
nothing), is resumed, at most MAX_RESUMES times per call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import Response

from app.callback_routing import forward, forwarded
from app.paths import VOICE_PATH
from app.webhook import WebhookForm
from telephony.protocol import Start
from telephony.security import public_url
from telephony.twiml import hangup_twiml

if TYPE_CHECKING:
    from app.call_owners import Holder
    from app.services import Services
    from app.settings import Settings

log = logging.getLogger(__name__)

RESUME = "resume"  # the voice webhook's query field, and the stream's <Parameter>
MAX_RESUMES = 2
RESUME_TEXT = "Sorry, we were cut off. I'm back."
# A resume can beat the holder's own record of how the call ended by the time its
# session takes to close (the socket is already gone for Twilio): waited for this long.
SETTLE_S = 2.0
_SETTLE_POLL_S = 0.05
# Outcomes of a stream that dropped under a live gateway (app.call): the caller did not
# hang up and the bot did not end the call.
RESUMABLE_OUTCOMES = frozenset({"disconnected"})


def resume_number(value: str) -> int:
    """The resume count from the (signed) query or a stream parameter; 0 for anything
    else than 1..MAX_RESUMES."""
    if value.isascii() and value.isdigit() and 0 < int(value) <= MAX_RESUMES:
        return int(value)
    return 0


def admission_key(call_sid: str, resume: int) -> str:
    """What admission and the stream token are keyed on: the CallSid for its first
    stream, `CallSid:resume:N` for the N-th resumed one (each single use)."""
    return call_sid if resume == 0 else f"{call_sid}:{RESUME}:{resume}"


def stream_key(start: Start) -> str:
    """A started stream's admission key, from the resume count its TwiML gave it."""
    return admission_key(start.call_sid, resume_number(start.parameters.get(RESUME, "")))


def record_id(start: Start) -> str:
    """The folder a stream's record is written to: the CallSid's own for its first
    stream, `CallSid-resumeN` for a resumed one (the gateway that takes the resume may be
    the one that wrote the first: one folder per stream, never one written twice)."""
    resume = resume_number(start.parameters.get(RESUME, ""))
    return start.call_sid if resume == 0 else f"{start.call_sid}-{RESUME}{resume}"


def is_resumed(start: Start) -> bool:
    return resume_number(start.parameters.get(RESUME, "")) > 0


def redirect_url(base: str, request: Request, resume: int) -> str | None:
    """Where Twilio goes when this call's stream (its `resume`-th) closes: the voice
    webhook again, marked as the next resume; None once MAX_RESUMES are spent."""
    if resume >= MAX_RESUMES:
        return None
    query = [
        (name, value)
        for name, value in parse_qsl(request.url.query, keep_blank_values=True)
        # The answering-machine verdict came for the first stream; it is not awaited again.
        if name not in (RESUME, "amd")
    ]
    query.append((RESUME, str(resume + 1)))
    return f"{public_url(base, VOICE_PATH)}?{urlencode(query)}"


def after_stream(
    settings: Settings, base: str, request: Request, resume: int
) -> dict[str, str | None]:
    """What the TwiML does around this call's stream (connect_stream_twiml's options):
    with REDIS_URL (other gateways to go on), a `<Redirect>` to resume after it and, on
    a resumed call, the apology first. A lone gateway hangs up, as ever."""
    if not settings.redis_url:
        return {}
    return {
        "redirect_url": redirect_url(base, request, resume),
        "say_first": RESUME_TEXT if resume else None,
    }


def may_resume(outcome: str) -> bool:
    """A call that ended with `outcome` here may be resumed on another stream."""
    return outcome in RESUMABLE_OUTCOMES


async def resume_refusal(
    services: Services, request: Request, form: WebhookForm, call_sid: str
) -> Response | None:
    """None when this resume webhook may start a new stream here; else the answer:
    a hang-up for a call ended on purpose, or the holder's own answer."""
    owners = services.call_owners
    holder = await owners.holder(call_sid)
    if holder is not None and holder.live and holder.gateway == owners.gateway:
        holder = await _settled(services, call_sid)
    elif holder is not None and holder.live and not forwarded(request):
        # Another gateway's live call: alive, it knows how the stream ended and answers;
        # dead (no answer), its call is resumed here.
        answer = await forward(services, request, form, VOICE_PATH, holder)
        if answer is not None:
            return answer
        log.warning("call %s: its gateway %s is gone; resuming it here", call_sid, holder.gateway)
        return None
    if holder is not None and not holder.live and not holder.resumable:
        log.info("call %s: ended on purpose on %s; not resumed", call_sid, holder.gateway)
        return Response(hangup_twiml(), media_type="text/xml")
    return None


async def _settled(services: Services, call_sid: str) -> Holder | None:
    """This gateway's record of its own call once the call has closed (SETTLE_S at most)."""
    owners = services.call_owners
    holder = await owners.holder(call_sid)
    try:
        async with asyncio.timeout(SETTLE_S):
            while holder is not None and holder.live:
                await asyncio.sleep(_SETTLE_POLL_S)
                holder = await owners.holder(call_sid)
    except TimeoutError:
        log.warning("call %s: still live here after its stream closed; resuming", call_sid)
    return holder
