"""The TwiML documents offhook answers with, built by the twilio SDK.

Each builder refuses input Twilio would reject or silently alter, so a misconfiguration
fails here with a clear ValueError instead of as a dead call.
"""

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from twilio.twiml.voice_response import VoiceResponse

# Twilio: a <Parameter>'s name plus value must stay under 500 characters.
MAX_PARAMETER_CHARS = 500
_E164 = re.compile(r"\+[1-9][0-9]{6,14}")
# sip:user@host[:port][;params]: what <Dial><Sip> takes (no spaces, no angle brackets).
_SIP_URI = re.compile(r"sips?:[^\s<>\"@]+@[A-Za-z0-9.\-]+(?::[0-9]{1,5})?(?:;[^\s<>\"]*)?")
# Characters XML 1.0 cannot carry even escaped; ElementTree would write them raw and
# produce a document Twilio cannot parse.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(label: str, value: str) -> str:
    if (bad := _NOT_XML.search(value)) is not None:
        raise ValueError(f"expected {label} without XML-invalid characters, got {bad.group()!r}")
    return value


def _check_stream_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.netloc:
        raise ValueError(f"expected a ws:// or wss:// stream URL with a host, got {url!r}")
    # Twilio may strip a query string from a stream URL; per-call data goes in <Parameter>.
    if "?" in url or "#" in url:
        raise ValueError(
            f"expected a stream URL without query string or fragment, got {url!r}; "
            "pass per-call data as parameters"
        )


def connect_stream_twiml(
    stream_url: str,
    parameters: Mapping[str, str],
    status_callback_url: str | None = None,
    *,
    redirect_url: str | None = None,
    say_first: str | None = None,
) -> str:
    """`<Connect><Stream>`: the bidirectional stream, with `parameters` as <Parameter>s.

    `<Connect>` blocks until the socket closes; Twilio then runs the next verb
    (https://www.twilio.com/docs/voice/twiml/stream,
    https://www.twilio.com/docs/voice/twiml/connect). Without `redirect_url` that is
    `<Hangup/>`: closing the stream ends the call (nothing after `</Connect>` would end it
    too; the explicit verb keeps it so if verbs are ever added). With it, `<Redirect>`:
    Twilio fetches new TwiML from that URL (POST, signed), and the call goes on; the
    server ends calls on purpose so that this never runs (app.call_resume).
    `say_first` is spoken by Twilio before the stream opens.
    """
    _check_stream_url(stream_url)
    if redirect_url is not None:
        redirect = urlsplit(redirect_url)
        if redirect.scheme not in ("http", "https") or not redirect.netloc:
            raise ValueError(f"expected an http(s):// redirect URL, got {redirect_url!r}")
        _xml_text("the redirect URL", redirect_url)
    if say_first is not None and not say_first.strip():
        raise ValueError("expected text to say first, got only whitespace")
    _xml_text("the stream URL", stream_url)
    for name, value in parameters.items():
        if not name:
            raise ValueError("expected non-empty parameter names, got ''")
        if len(name) + len(value) >= MAX_PARAMETER_CHARS:
            raise ValueError(
                f"expected parameter {name[:40]!r} name and value under "
                f"{MAX_PARAMETER_CHARS} characters, got {len(name) + len(value)}"
            )
        _xml_text(f"parameter {name[:40]!r}", name + value)
    if status_callback_url is not None:
        callback = urlsplit(status_callback_url)
        if callback.scheme not in ("http", "https") or not callback.netloc:
            raise ValueError(
                f"expected an http(s):// status callback URL, got {status_callback_url!r}"
            )
        _xml_text("the status callback URL", status_callback_url)

    response = VoiceResponse()
    if say_first is not None:
        response.say(_xml_text("the text to say first", say_first))
    connect = response.connect()
    stream = connect.stream(
        url=stream_url,
        status_callback=status_callback_url,
        status_callback_method="POST" if status_callback_url is not None else None,
    )
    for name, value in parameters.items():
        stream.parameter(name=name, value=value)
    if redirect_url is not None:
        response.redirect(redirect_url, method="POST")
    else:
        response.hangup()
    return str(response.to_xml())


def hangup_twiml() -> str:
    """`<Hangup/>` alone: a call that must not go on (one the bot ended on purpose)."""
    response = VoiceResponse()
    response.hangup()
    return str(response.to_xml())


def say_and_hangup_twiml(text: str) -> str:
    """Speak `text` and hang up: the answer when we are at capacity or failing."""
    if not text.strip():
        raise ValueError("expected text to say, got only whitespace")
    response = VoiceResponse()
    response.say(_xml_text("the text to say", text))
    response.hangup()
    return str(response.to_xml())


def is_transfer_target(target: str) -> bool:
    """An E.164 number or a SIP URI: what `dial_twiml` can dial."""
    return _E164.fullmatch(target) is not None or _SIP_URI.fullmatch(target) is not None


def dial_twiml(target: str) -> str:
    """`<Response><Dial>+1...</Dial></Response>` (or `<Dial><Sip>sip:...</Sip></Dial>`),
    for a REST call transfer.

    No XML declaration: it goes inside the `Twiml` form field of a call update.
    """
    response = VoiceResponse()
    if _SIP_URI.fullmatch(target) is not None:
        response.dial().sip(target)
    elif _E164.fullmatch(target) is not None:
        response.dial(target)
    else:
        raise ValueError(
            f"expected an E.164 number like +15551234567 or a sip: URI, got {target[:40]!r}"
        )
    return str(response.to_xml(xml_declaration=False))


def empty_twiml() -> str:
    """`<Response />`: acknowledge a webhook with nothing to do.

    Answering a voice webhook with it ends the call.
    """
    return str(VoiceResponse().to_xml())
