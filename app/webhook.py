"""Reading a Twilio webhook: bounded before parsing, checked before use.

A Twilio webhook is a few kB of form-encoded text. Anything else is refused from its
headers, before a byte of the body is read; the body is then read with a hard cap and
a deadline, parsed with a field limit, and only then is the signature checked.
Every refusal is a `Refused` carrying a 4xx status, never an exception that becomes 500.
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from collections.abc import KeysView
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from starlette.requests import HTTPConnection, Request

from telephony.security import public_url

if TYPE_CHECKING:
    from app.services import Services
    from app.settings import Settings

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
MAX_FIELDS = 200
BODY_TIMEOUT_S = 10.0
FORM_TYPE = "application/x-www-form-urlencoded"

CALL_SID = re.compile(r"CA[0-9a-f]{32}")
ACCOUNT_SID = re.compile(r"AC[0-9a-f]{32}")
# What a Host header may be when no PUBLIC_URL is set (unsigned local use only).
_HOST = re.compile(r"(?:[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?")
# A <Parameter> holds name+value under 500 characters; a SIP URI can be longer.
MAX_PARTY_CHARS = 256


class Refused(Exception):
    """A request we answer with `status` and a one-line reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WebhookForm:
    """Every value of every field, as Twilio's signature covers them (FormLike)."""

    fields: dict[str, list[str]]

    def keys(self) -> KeysView[str]:
        return self.fields.keys()

    def getlist(self, key: str) -> list[str]:
        return self.fields.get(key, [])

    def get(self, key: str) -> str:
        values = self.fields.get(key)
        return values[0] if values else ""


def check_headers(request: Request) -> None:
    """Refused unless the headers promise a small form: 415 not a form, 400/413 length."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() != FORM_TYPE:
        raise Refused(415, f"expected {FORM_TYPE}")
    check_length(request)


def check_length(request: Request, max_bytes: int = MAX_BODY_BYTES) -> None:
    """Refused unless Content-Length (when given) is a number of at most `max_bytes`."""
    length = request.headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit()):
            raise Refused(400, "malformed Content-Length")
        if int(length) > max_bytes:
            raise Refused(413, f"body over {max_bytes} bytes")


async def read_body(request: Request, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The body, or Refused: 413 over `max_bytes`, 408 not received within BODY_TIMEOUT_S."""
    body = bytearray()
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            # Chunked bodies have no Content-Length: the cap holds while reading too.
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_bytes:
                    raise Refused(413, f"body over {max_bytes} bytes")
    except TimeoutError:
        raise Refused(408, "body not received in time") from None
    return bytes(body)


async def read_form(request: Request) -> WebhookForm:
    """The form (after `check_headers`), or Refused: 413 too big, 408 slow, 400 malformed."""
    body = await read_body(request)
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            max_num_fields=MAX_FIELDS,
            encoding="utf-8",
            errors="strict",
        )
    except (UnicodeDecodeError, ValueError):
        raise Refused(400, "malformed form body") from None
    fields: dict[str, list[str]] = {}
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    return WebhookForm(fields)


def signed_url(base: str, path: str, request: Request) -> str:
    """The URL Twilio signed: the public one, with the query string it called."""
    query = request.scope.get("query_string", b"").decode("latin-1")
    url = public_url(base, path)
    return f"{url}?{query}" if query else url


def host_base_url(request: HTTPConnection) -> str:
    """http(s)://Host, for unsigned local use without PUBLIC_URL; Refused if odd."""
    host = request.headers.get("host", "localhost")
    if not _HOST.fullmatch(host):
        raise Refused(400, "malformed Host header")
    scheme = "https" if request.url.scheme in ("https", "wss") else "http"
    return f"{scheme}://{host}"


def base_url(conn: HTTPConnection, settings: Settings) -> str:
    """The public base URL: configured, never request.url (wrong behind a proxy).

    Only an unsigned server on loopback may have no PUBLIC_URL (Settings.check_exposure):
    with a token, the URL a signature covers never comes from the request's headers.
    """
    if settings.public_url:
        return settings.public_url.rstrip("/")
    return host_base_url(conn)


async def signed_form(request: Request, services: Services, path: str) -> WebhookForm:
    """A Twilio webhook's form, read within bounds and checked against its signature
    (over the public URL with the query string Twilio called); else Refused (4xx)."""
    check_headers(request)
    signature = request.headers.get("x-twilio-signature")
    if services.validator is not None and not signature:
        # No signature at all: not worth reading the body for.
        services.metrics.rejected_calls.labels(reason="bad_signature").inc()
        raise Refused(403, "missing signature")
    form = await read_form(request)
    base = base_url(request, services.settings)
    if services.validator is not None:
        url = signed_url(base, path, request)
        # Off the loop: HMAC over up to MAX_BODY_BYTES (twice, with and without the
        # port) must not stall live calls' audio.
        valid = await asyncio.to_thread(services.validator.validate, url, form, signature)
        if not valid:
            services.metrics.rejected_calls.labels(reason="bad_signature").inc()
            services.refusals.warning(
                "webhook signature",
                "%s: invalid X-Twilio-Signature from %s",
                path,
                request.client,
            )
            raise Refused(403, "invalid signature")
    return form


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in text)


def call_sid(form: WebhookForm) -> str:
    sid = form.get("CallSid")
    if not CALL_SID.fullmatch(sid):
        raise Refused(400, "CallSid must be CA followed by 32 hex digits")
    return sid


def account_sid(form: WebhookForm, expected: str) -> str:
    """AccountSid checked for shape, and against TWILIO_ACCOUNT_SID when that is set."""
    sid = form.get("AccountSid")
    if sid and not ACCOUNT_SID.fullmatch(sid):
        raise Refused(400, "AccountSid must be AC followed by 32 hex digits")
    if expected and sid != expected:
        raise Refused(403, "webhook from another account")
    return sid


def party(form: WebhookForm, name: str) -> str:
    """From / To: no control characters; long SIP URIs cut to fit a <Parameter>."""
    value = form.get(name)
    if _has_control(value):
        raise Refused(400, f"{name} holds control characters")
    return value[:MAX_PARTY_CHARS]
