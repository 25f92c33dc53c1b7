"""Twilio's side of setting a call up, as data: the form Twilio POSTs to a number's
voice webhook, the `<Connect><Stream>` it reads from the TwiML answer, and where (and
whether, signed) it then opens the media stream.

Errors: SimulationError, when the answer or the stream URL cannot be used.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

__all__ = [
    "TWILIO_USER_AGENT",
    "WEBHOOK_PATH",
    "SimulationError",
    "StreamTarget",
    "check_stream_host",
    "connect_uri",
    "parse_twiml",
    "twiml_warnings",
    "voice_webhook_params",
]

WEBHOOK_PATH: Final = "/twilio/voice"
# Twilio fetches webhooks with this User-Agent; some servers log or route on it.
TWILIO_USER_AGENT: Final = "TwilioProxy/1.1"


class SimulationError(Exception):
    """The call could not be set up: webhook refused, TwiML unusable, socket refused."""


@dataclass(frozen=True)
class StreamTarget:
    """The `<Connect><Stream>` of a TwiML answer, and what Twilio does once it closes."""

    url: str
    parameters: dict[str, str]
    # The verbs after `<Connect>`, which Twilio runs when the stream's socket closes
    # (twilio.com/docs/voice/twiml/stream: "the next TwiML instruction"): (tag, text).
    after: tuple[tuple[str, str], ...] = ()

    @property
    def redirect(self) -> str | None:
        """The URL Twilio fetches next, if a <Redirect> follows the stream before any
        verb that ends or answers the call (the simulator does not play <Say>/<Play>)."""
        for verb, text in self.after:
            if verb == "Redirect":
                return text or None
            if verb not in ("Say", "Play", "Pause"):
                return None
        return None


def parse_twiml(twiml: str) -> StreamTarget:
    """Find the bidirectional stream in a TwiML answer, or raise SimulationError."""
    try:
        root = ET.fromstring(twiml)
    except ET.ParseError as exc:
        raise SimulationError(
            f"the webhook answered with invalid XML ({exc}): {twiml[:300]}"
        ) from exc
    if root.tag != "Response":
        raise SimulationError(f"expected TwiML <Response>, got <{root.tag}>")
    stream = root.find("./Connect/Stream")
    if stream is None:
        hint = (
            " (<Start><Stream> is receive-only: the bot could not talk back)"
            if root.find("./Start/Stream") is not None
            else ""
        )
        raise SimulationError(f"expected <Connect><Stream> in the TwiML{hint}: {twiml[:300]}")
    url = stream.get("url")
    if not url:
        raise SimulationError("expected a url attribute on <Stream>")
    parameters: dict[str, str] = {}
    for parameter in stream.findall("./Parameter"):
        name = parameter.get("name")
        if name is None:
            raise SimulationError("expected a name attribute on every <Parameter>")
        parameters[name] = parameter.get("value", "")
    verbs = list(root)
    connect = root.find("./Connect")
    after = verbs[verbs.index(connect) + 1 :] if connect is not None else []
    return StreamTarget(
        url=url,
        parameters=parameters,
        after=tuple((verb.tag, (verb.text or "").strip()) for verb in after),
    )


def twiml_warnings(target: StreamTarget) -> list[str]:
    """What Twilio would do differently with this stream URL."""
    parts = urlsplit(target.url)
    found = []
    if parts.scheme != "wss":
        found.append(f"Twilio requires a wss:// stream URL, got {parts.scheme}://")
    if parts.query:
        found.append("the stream URL has a query string, which Twilio may strip")
    return found


def voice_webhook_params(
    call_sid: str,
    account_sid: str,
    from_number: str,
    to_number: str,
    *,
    direction: str = "inbound",
) -> dict[str, str]:
    """The form Twilio POSTs to a number's voice webhook (the parameters that matter here)."""
    return {
        "CallSid": call_sid,
        "AccountSid": account_sid,
        "From": from_number,
        "To": to_number,
        "Caller": from_number,
        "Called": to_number,
        # An outbound call's URL is fetched once the callee has answered.
        "CallStatus": "ringing" if direction == "inbound" else "in-progress",
        "ApiVersion": "2010-04-01",
        "Direction": direction,
    }


def check_stream_host(stream_url: str, public: str) -> None:
    """SimulationError unless `stream_url` is on `public`'s host and under its path."""
    stream, base = urlsplit(stream_url), urlsplit(public)
    prefix = base.path.rstrip("/") + "/"
    secure = {"https": True, "wss": True}

    def origin(url: SplitResult) -> tuple[str | None, int]:
        # ws(s) and http(s) on the same host and port are one server; default ports spelt
        # out or not.
        default = 443 if secure.get(url.scheme, False) else 80
        return (url.hostname, url.port or default)

    if origin(stream) != origin(base) or not stream.path.startswith(prefix):
        raise SimulationError(
            f"the server's TwiML names a stream at {stream.netloc}{stream.path[:80]}, "
            f"not under {public}: not signing a request for it"
        )


def connect_uri(stream_url: str, base_url: str, connect_to: str | None) -> str:
    """Where to open the socket: the TwiML's URL, or its path on `connect_to`."""
    stream = urlsplit(stream_url)
    if stream.scheme not in ("ws", "wss"):
        raise SimulationError(f"expected a ws:// or wss:// stream URL, got {stream_url!r}")
    if connect_to:
        target = urlsplit(connect_to if "://" in connect_to else f"ws://{connect_to}")
        scheme = {"http": "ws", "https": "wss"}.get(target.scheme, target.scheme)
        return urlunsplit((scheme, target.netloc, stream.path, stream.query, ""))
    base = urlsplit(base_url)
    if stream.scheme == "wss" and base.scheme == "http" and stream.netloc == base.netloc:
        # A server reached over plain http cannot terminate TLS on the same port: it
        # names wss:// because Twilio requires it, so speak plain ws to it locally.
        return urlunsplit(("ws", stream.netloc, stream.path, stream.query, ""))
    return stream_url
