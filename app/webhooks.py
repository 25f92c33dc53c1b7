"""What every Twilio webhook handler needs: the public base URL and a checked signature."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection, Request

from app.settings import Settings
from telephony.security import public_url

if TYPE_CHECKING:
    from app.services import Services

log = logging.getLogger(__name__)


def base_url(conn: HTTPConnection, settings: Settings) -> str:
    """The public base URL: configured, else (local development) the Host header."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    scheme = "https" if conn.url.scheme in ("https", "wss") else "http"
    return f"{scheme}://{conn.headers.get('host', 'localhost')}"


async def signed_form(request: Request, path: str) -> Any | None:
    """The webhook's form, or None if its X-Twilio-Signature does not check out."""
    services: Services = request.app.state.services
    form = await request.form()
    if services.validator is not None:
        url = public_url(base_url(request, services.settings), path)
        if not services.validator.validate(url, form, request.headers.get("x-twilio-signature")):
            log.warning("%s: invalid X-Twilio-Signature from %s", path, request.client)
            return None
    return form
