import io
from collections.abc import Callable

import pytest
from starlette.datastructures import FormData, Headers, UploadFile

from telephony.security import (
    CallTokens,
    WebhookValidator,
    public_url,
    sign,
    stream_url,
)

SECRET = b"s" * 32
# Twilio's published example (docs: webhooks security).
DOCS_TOKEN = "12345"
DOCS_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
DOCS_SIGNATURE = "RSOYDt4T1cUTdK1PDd93/VVr8B8="
STREAM_URL = "wss://bot.example.com/media"


def _docs_params() -> dict[str, str]:
    return {
        "CallSid": "CA1234567890ABCDE",
        "Caller": "+14158675309",
        "Digits": "1234",
        "From": "+14158675309",
        "To": "+18005551212",
    }


# --- CallTokens --------------------------------------------------------------------------


def test_issued_token_is_its_issue_second_and_32_hex_characters() -> None:
    token = CallTokens(SECRET, clock=lambda: 1_700_000_000.7).issue("CA1")

    issued, mac = token.split(".")
    assert int(issued, 16) == 1_700_000_000
    assert len(mac) == 32 and int(mac, 16) >= 0


def test_issue_is_deterministic_for_a_call_within_a_second() -> None:
    tokens = CallTokens(SECRET, clock=lambda: 1_700_000_000.0)
    assert tokens.issue("CA1") == tokens.issue("CA1")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_token_expires_after_its_validity_window() -> None:
    clock = Clock(1_700_000_000.0)
    tokens = CallTokens(SECRET, max_age_s=60, clock=clock)
    token = tokens.issue("CA1")

    clock.now += 59
    assert tokens.verify("CA1", token)
    clock.now += 2
    assert not tokens.verify("CA1", token)


def test_a_token_from_the_future_is_refused() -> None:
    clock = Clock(1_700_000_000.0)
    tokens = CallTokens(SECRET, clock=clock)
    token = tokens.issue("CA1")

    clock.now -= 30
    assert not tokens.verify("CA1", token)


def test_a_token_whose_issue_time_was_moved_is_refused() -> None:
    clock = Clock(1_700_000_000.0)
    tokens = CallTokens(SECRET, clock=clock)
    _issued, mac = tokens.issue("CA1").split(".")
    clock.now += 3600

    assert not tokens.verify("CA1", f"{int(clock.now):x}.{mac}")


def test_verify_accepts_the_token_issued_for_the_call() -> None:
    tokens = CallTokens(SECRET)

    assert tokens.verify("CA1", tokens.issue("CA1"))


def test_verify_refuses_a_token_issued_for_another_call() -> None:
    tokens = CallTokens(SECRET)

    assert not tokens.verify("CA2", tokens.issue("CA1"))


def test_verify_refuses_a_token_forged_with_another_secret() -> None:
    forged = CallTokens(b"x" * 32).issue("CA1")

    assert not CallTokens(SECRET).verify("CA1", forged)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1],
        lambda t: t + "0",
        lambda t: t.upper(),
        lambda t: "",
        lambda t: "0" * 32,
        lambda t: t.split(".")[1],
        lambda t: "-1." + t.split(".")[1],
    ],
    ids=["truncated", "extended", "upper-case", "empty", "zeros", "no-time", "bad-time"],
)
def test_verify_refuses_an_altered_token(mangle: Callable[[str], str]) -> None:
    tokens = CallTokens(SECRET)
    token = tokens.issue("CA1")

    assert not tokens.verify("CA1", mangle(token))


@pytest.mark.parametrize("token", ["é" * 32, "\ud800" * 32])
def test_verify_refuses_non_ascii_tokens_without_raising(token: str) -> None:
    assert not CallTokens(SECRET).verify("CA1", token)


def test_verify_refuses_an_empty_call_sid() -> None:
    assert not CallTokens(SECRET).verify("", "0" * 32)


def test_verify_handles_a_call_sid_with_lone_surrogates() -> None:
    tokens = CallTokens(SECRET)

    assert tokens.verify("CA\ud800", tokens.issue("CA\ud800"))


def test_issue_refuses_an_empty_call_sid() -> None:
    with pytest.raises(ValueError, match="CallSid"):
        CallTokens(SECRET).issue("")


def test_call_tokens_refuse_a_short_secret() -> None:
    with pytest.raises(ValueError, match="at least 16 bytes, got 3"):
        CallTokens(b"abc")


# --- sign / WebhookValidator.validate ---------------------------------------------------


def test_sign_reproduces_twilios_published_example() -> None:
    assert sign(DOCS_TOKEN, DOCS_URL, _docs_params()) == DOCS_SIGNATURE


def test_validate_accepts_twilios_published_example() -> None:
    assert WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, _docs_params(), DOCS_SIGNATURE)


def test_validate_accepts_starlette_form_data() -> None:
    form = FormData(list(_docs_params().items()))

    assert WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, form, DOCS_SIGNATURE)


def test_validate_signs_every_value_of_a_repeated_field() -> None:
    form = FormData([("CallSid", "CA1"), ("StirVerstat", "A"), ("StirVerstat", "B")])
    signature = sign(DOCS_TOKEN, DOCS_URL, form)
    only_first = FormData([("CallSid", "CA1"), ("StirVerstat", "A")])

    assert WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, form, signature)
    assert not WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, only_first, signature)


def test_validate_refuses_a_tampered_parameter() -> None:
    params = _docs_params()
    params["Digits"] = "9999"

    assert not WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, params, DOCS_SIGNATURE)


def test_validate_refuses_an_added_parameter() -> None:
    params = _docs_params()
    params["CallerName"] = "Mallory"

    assert not WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, params, DOCS_SIGNATURE)


def test_validate_refuses_a_dropped_parameter() -> None:
    params = _docs_params()
    del params["Digits"]

    assert not WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, params, DOCS_SIGNATURE)


def test_validate_refuses_another_url() -> None:
    url = "https://mycompany.com/other.php?foo=1&bar=2"

    assert not WebhookValidator(DOCS_TOKEN).validate(url, _docs_params(), DOCS_SIGNATURE)


def test_validate_refuses_another_auth_token() -> None:
    assert not WebhookValidator("54321").validate(DOCS_URL, _docs_params(), DOCS_SIGNATURE)


@pytest.mark.parametrize("signature", [None, ""])
def test_validate_refuses_a_missing_signature(signature: str | None) -> None:
    assert not WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, _docs_params(), signature)


def test_validate_tolerates_the_default_port_in_the_url() -> None:
    url = "https://mycompany.com:443/myapp.php?foo=1&bar=2"

    assert WebhookValidator(DOCS_TOKEN).validate(url, _docs_params(), DOCS_SIGNATURE)


def test_validate_refuses_a_form_carrying_a_file() -> None:
    upload = UploadFile(io.BytesIO(b"x"), filename="x.txt", headers=Headers())
    form = FormData([("CallSid", "CA1"), ("file", upload)])
    signature = sign(DOCS_TOKEN, DOCS_URL, {"CallSid": "CA1"})

    assert not WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, form, signature)


def test_validate_refuses_params_that_are_not_a_mapping_or_form() -> None:
    with pytest.raises(TypeError, match="Mapping or a form"):
        WebhookValidator(DOCS_TOKEN).validate(DOCS_URL, [("a", "b")], "sig")  # type: ignore[arg-type]


def test_webhook_validator_refuses_an_empty_auth_token() -> None:
    with pytest.raises(ValueError, match="auth token"):
        WebhookValidator("")


def test_sign_refuses_a_form_carrying_a_file() -> None:
    upload = UploadFile(io.BytesIO(b"x"), filename="x.txt", headers=Headers())

    with pytest.raises(ValueError, match="text"):
        sign(DOCS_TOKEN, DOCS_URL, FormData([("file", upload)]))


# --- WebhookValidator.validate_stream ---------------------------------------------------


def test_validate_stream_accepts_a_handshake_signed_over_the_wss_url() -> None:
    signature = sign(DOCS_TOKEN, STREAM_URL, {})

    assert WebhookValidator(DOCS_TOKEN).validate_stream(STREAM_URL, signature)


def test_validate_stream_refuses_a_signature_over_another_url() -> None:
    signature = sign(DOCS_TOKEN, "wss://bot.example.com/other", {})

    assert not WebhookValidator(DOCS_TOKEN).validate_stream(STREAM_URL, signature)


def test_validate_stream_refuses_a_signature_over_the_https_form_of_the_url() -> None:
    signature = sign(DOCS_TOKEN, "https://bot.example.com/media", {})

    assert not WebhookValidator(DOCS_TOKEN).validate_stream(STREAM_URL, signature)


@pytest.mark.parametrize("signature", [None, ""])
def test_validate_stream_refuses_a_missing_signature(signature: str | None) -> None:
    assert not WebhookValidator(DOCS_TOKEN).validate_stream(STREAM_URL, signature)


def test_validate_stream_refuses_a_non_websocket_url() -> None:
    with pytest.raises(ValueError, match="ws:// or wss://"):
        WebhookValidator(DOCS_TOKEN).validate_stream("https://bot.example.com/media", "sig")


# --- public_url / stream_url -------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "path", "expected"),
    [
        ("https://bot.example.com", "/voice", "https://bot.example.com/voice"),
        ("https://bot.example.com/", "/voice", "https://bot.example.com/voice"),
        ("https://bot.example.com", "voice", "https://bot.example.com/voice"),
        ("https://x.ngrok.app/prefix", "/voice", "https://x.ngrok.app/prefix/voice"),
        ("https://x.ngrok.app/prefix/", "/voice", "https://x.ngrok.app/prefix/voice"),
        ("http://localhost:8000", "/voice", "http://localhost:8000/voice"),
        ("https://bot.example.com", "", "https://bot.example.com/"),
        ("https://x.ngrok.app/prefix", "", "https://x.ngrok.app/prefix"),
    ],
)
def test_public_url_joins_base_and_path(base: str, path: str, expected: str) -> None:
    assert public_url(base, path) == expected


@pytest.mark.parametrize(
    "base",
    [
        "wss://bot.example.com",
        "bot.example.com",
        "https://",
        "https://bot.example.com?x=1",
        "https://bot.example.com/?",
        "https://bot.example.com#top",
        "",
    ],
)
def test_public_url_refuses_a_base_that_is_not_a_plain_http_url(base: str) -> None:
    with pytest.raises(ValueError, match="base URL"):
        public_url(base, "/voice")


def test_stream_url_turns_https_into_wss() -> None:
    assert stream_url("https://x.ngrok.app/prefix", "/media") == "wss://x.ngrok.app/prefix/media"


def test_stream_url_turns_http_into_ws() -> None:
    assert stream_url("http://localhost:8000", "/media") == "ws://localhost:8000/media"


def test_stream_url_refuses_a_websocket_base() -> None:
    with pytest.raises(ValueError, match="base URL"):
        stream_url("wss://bot.example.com", "/media")
