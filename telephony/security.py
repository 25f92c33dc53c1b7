"""Who may talk to us: Twilio request signatures, per-call tokens, public URLs.

Twilio signs each webhook and each Media Stream handshake with the account's auth token
over the exact public URL it called (see docs/webhooks-security). Behind a proxy the
URL our server sees is not that one, so callers rebuild it with `public_url` /
`stream_url` from a configured public base URL.
"""

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from twilio.request_validator import RequestValidator

# Twilio's signatures are HMAC-SHA1 keyed with the auth token; ours are keyed with a
# separate secret, and this label keeps a token for one purpose from matching another.
_TOKEN_LABEL = b"offhook/call-token/v2:"
_TOKEN_HEX_CHARS = 32
_MIN_SECRET_BYTES = 16
# Twilio opens the stream within a second or two of our TwiML; a minute is generous.
TOKEN_MAX_AGE_S = 60.0
_CLOCK_SKEW_S = 2.0
_HEX_SECONDS = re.compile(r"[0-9a-f]{1,12}")


class CallTokens:
    """A per-call token passed as a <Parameter> and checked at `start`.

    It ties a Media Stream to the webhook that created it: a stream whose token does
    not match its CallSid did not come from our TwiML. The token carries the second it
    was issued, inside the MAC, so a captured one is good only for `max_age_s`; the
    server also lets each CallSid start one stream only (app.admission).
    """

    def __init__(
        self,
        secret: bytes,
        *,
        max_age_s: float = TOKEN_MAX_AGE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if len(secret) < _MIN_SECRET_BYTES:
            raise ValueError(
                f"expected a secret of at least {_MIN_SECRET_BYTES} bytes, got {len(secret)}"
            )
        self._secret = bytes(secret)
        self.max_age_s = max_age_s
        self._clock = clock

    def issue(self, call_sid: str) -> str:
        """'<issued, hex seconds>.<mac>'."""
        if not call_sid:
            raise ValueError("expected a non-empty CallSid, got ''")
        issued = f"{int(self._clock()):x}"
        return f"{issued}.{self._mac(call_sid, issued)}"

    def _mac(self, call_sid: str, issued: str) -> str:
        # surrogatepass: a CallSid parsed from JSON may hold lone surrogates.
        message = _TOKEN_LABEL + issued.encode() + b":" + call_sid.encode("utf-8", "surrogatepass")
        mac = hmac.new(self._secret, message, hashlib.sha256)
        return mac.hexdigest()[:_TOKEN_HEX_CHARS]

    def verify(self, call_sid: str, token: str) -> bool:
        """Constant-time check of MAC and age; False (never an error) for any bad input."""
        if not call_sid:
            return False
        issued, dot, mac = token.partition(".")
        if not dot or not _HEX_SECONDS.fullmatch(issued):
            return False
        expected = self._mac(call_sid, issued).encode("ascii")
        # Compare bytes: compare_digest raises TypeError on non-ASCII str.
        if not hmac.compare_digest(expected, mac.encode("utf-8", "surrogatepass")):
            return False
        age = self._clock() - int(issued, 16)
        return -_CLOCK_SKEW_S <= age <= self.max_age_s


class FormLike(Protocol):
    """What a multi-valued form offers (Starlette's FormData, Werkzeug's MultiDict)."""

    def keys(self) -> Iterable[str]: ...

    def getlist(self, key: str) -> list[Any]: ...


class _Params:
    """Every value of every parameter, handed to the SDK through `getlist`."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, list[str]]) -> None:
        self._values = values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def getlist(self, key: str) -> list[str]:
        return self._values[key]


def _collect(params: Mapping[str, str] | FormLike) -> _Params | None:
    """All values as strings, or None when one is not text (a file upload).

    Twilio's webhooks carry text only, so a non-text value cannot be a genuine request.
    """
    values: dict[str, list[Any]]
    # getlist first: Starlette's FormData is also a Mapping, whose [] gives one value.
    getlist = getattr(params, "getlist", None)
    if callable(getlist):
        values = {key: list(getlist(key)) for key in params.keys()}
    elif isinstance(params, Mapping):
        values = {key: [value] for key, value in params.items()}
    else:
        raise TypeError(f"expected a Mapping or a form with getlist, got {type(params).__name__}")
    for key, found in values.items():
        if not isinstance(key, str) or not all(isinstance(value, str) for value in found):
            return None
    return _Params(values)


class WebhookValidator:
    """Checks `X-Twilio-Signature` with the account's auth token."""

    def __init__(self, auth_token: str) -> None:
        if not auth_token:
            raise ValueError("expected a non-empty Twilio auth token, got ''")
        self._validator = RequestValidator(auth_token)

    def validate(
        self, url: str, params: Mapping[str, str] | FormLike, signature: str | None
    ) -> bool:
        """True if `signature` signs `url` plus ALL received POST parameters.

        `url` must be the public URL Twilio called, query string included.
        """
        if not signature:
            return False
        collected = _collect(params)
        if collected is None:
            return False
        return bool(self._validator.validate(url, collected, signature))

    def validate_stream(self, url: str, signature: str | None) -> bool:
        """The Media Stream handshake: signed over the ws(s):// URL, no parameters."""
        scheme = urlsplit(url).scheme
        if scheme not in ("ws", "wss"):
            raise ValueError(f"expected a ws:// or wss:// stream URL, got scheme {scheme!r}")
        if not signature:
            return False
        return bool(self._validator.validate(url, {}, signature))


def sign(auth_token: str, url: str, params: Mapping[str, str] | FormLike) -> str:
    """The `X-Twilio-Signature` Twilio would send (for the simulator and tests)."""
    collected = _collect(params)
    if collected is None:
        raise ValueError("expected only text parameters: Twilio signs text form fields")
    return str(RequestValidator(auth_token).compute_signature(url, collected))


def public_url(base_url: str, path: str) -> str:
    """Join a configured public base URL (which may carry a path prefix) and a path.

    public_url("https://x.ngrok.app/prefix", "/voice") == "https://x.ngrok.app/prefix/voice"
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http(s)://host base URL, got {base_url!r}")
    if parts.query or parts.fragment or "?" in base_url or "#" in base_url:
        raise ValueError(f"expected a base URL without query or fragment, got {base_url!r}")
    prefix = parts.path.rstrip("/")
    suffix = path.lstrip("/")
    joined = f"{prefix}/{suffix}" if suffix else prefix or "/"
    return urlunsplit((parts.scheme, parts.netloc, joined, "", ""))


def stream_url(base_url: str, path: str) -> str:
    """`public_url` with http→ws and https→wss, for <Stream url=...>."""
    url = public_url(base_url, path)
    scheme, rest = url.split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}"
