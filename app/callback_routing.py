"""Twilio's callbacks about a call another gateway holds: handed to that gateway.

Every gateway shares PUBLIC_URL, so Twilio's signature over it is valid on any of them.
A callback that lands on a gateway that does not hold the call is re-sent to the holder
(its GATEWAY_URL) with the same path, query, fields and `X-Twilio-Signature`: the holder
checks it exactly as if Twilio had sent it there, so forwarding needs no secret of its
own and grants nothing a captured callback did not already. A forwarded request is never
forwarded again. A holder that does not answer in FORWARD_TIMEOUT_S (or answers 5xx) is
taken for gone: the callback is then handled where it landed, as one gateway would.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app.webhook import WebhookForm

if TYPE_CHECKING:
    from app.call_owners import Holder
    from app.services import Services

log = logging.getLogger(__name__)

FORWARDED_BY = "x-offhook-forwarded-by"
FORWARD_TIMEOUT_S = 2.0


def forwarded(request: Request) -> bool:
    """Sent here by another gateway: handle it here, whoever holds the call."""
    return FORWARDED_BY in request.headers


async def holder_elsewhere(services: Services, request: Request, call_sid: str) -> Holder | None:
    """The call's holder when it is another gateway and this request may go to it."""
    if forwarded(request):
        return None
    owners = services.call_owners
    holder = await owners.holder(call_sid)
    if holder is None or holder.gateway == owners.gateway:
        return None
    return holder


async def forward(
    services: Services, request: Request, form: WebhookForm, path: str, holder: Holder
) -> Response | None:
    """The holder's answer to this callback, or None when it gave none (handle it here)."""
    query = request.scope.get("query_string", b"").decode("latin-1")
    url = f"{holder.gateway.rstrip('/')}{path}" + (f"?{query}" if query else "")
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        FORWARDED_BY: services.call_owners.gateway,
    }
    if signature := request.headers.get("x-twilio-signature"):
        headers["x-twilio-signature"] = signature
    # The signature covers names and values, not their order or encoding (twilio.com/
    # docs/usage/webhooks/webhooks-security): the fields re-encoded verify the same.
    body = urlencode([(name, value) for name in form.keys() for value in form.getlist(name)])
    try:
        async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S) as client:
            answer = await client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        services.metrics.errors.labels(stage="callback_forward").inc()
        log.warning("%s for a call on %s: not delivered there (%s); handled here", path, url, exc)
        return None
    if answer.status_code >= 500:
        services.metrics.errors.labels(stage="callback_forward").inc()
        log.warning("%s: %s answered %d; handled here", path, url, answer.status_code)
        return None
    log.info("%s: forwarded to %s (%d)", path, holder.gateway, answer.status_code)
    return Response(
        answer.content,
        status_code=answer.status_code,
        media_type=answer.headers.get("content-type"),
    )
