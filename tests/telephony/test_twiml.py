import xml.etree.ElementTree as ET

import pytest

from telephony.twiml import (
    connect_stream_twiml,
    dial_twiml,
    empty_twiml,
    is_transfer_target,
    say_and_hangup_twiml,
)

STREAM_URL = "wss://bot.example.com/media"
CALLBACK_URL = "https://bot.example.com/stream-status"


def _stream(twiml: str) -> ET.Element:
    root = ET.fromstring(twiml)
    assert root.tag == "Response"
    assert [child.tag for child in root] == ["Connect", "Hangup"]
    connect = root[0]
    assert [child.tag for child in connect] == ["Stream"]
    return connect[0]


def test_connect_stream_twiml_declares_xml() -> None:
    assert connect_stream_twiml(STREAM_URL, {}).startswith('<?xml version="1.0" encoding="UTF-8"?>')


def test_connect_stream_twiml_is_response_connect_stream_with_the_url() -> None:
    stream = _stream(connect_stream_twiml(STREAM_URL, {}))

    assert stream.attrib == {"url": STREAM_URL}


def test_connect_stream_twiml_hangs_up_once_the_stream_is_closed() -> None:
    # Twilio runs the verb after </Connect> when our server closes the socket.
    root = ET.fromstring(connect_stream_twiml(STREAM_URL, {"a": "b"}))

    assert [child.tag for child in root] == ["Connect", "Hangup"]


def test_connect_stream_twiml_passes_parameters_in_order() -> None:
    stream = _stream(connect_stream_twiml(STREAM_URL, {"token": "t1", "caller": "+15551234567"}))

    assert [(p.tag, p.attrib) for p in stream] == [
        ("Parameter", {"name": "token", "value": "t1"}),
        ("Parameter", {"name": "caller", "value": "+15551234567"}),
    ]


def test_connect_stream_twiml_escapes_parameter_values() -> None:
    value = "<&\"'>"

    stream = _stream(connect_stream_twiml(STREAM_URL, {"v": value}))

    assert stream[0].attrib["value"] == value


def test_connect_stream_twiml_adds_a_post_status_callback() -> None:
    stream = _stream(connect_stream_twiml(STREAM_URL, {}, status_callback_url=CALLBACK_URL))

    assert stream.attrib == {
        "url": STREAM_URL,
        "statusCallback": CALLBACK_URL,
        "statusCallbackMethod": "POST",
    }


def test_connect_stream_twiml_accepts_plain_ws_for_local_testing() -> None:
    assert _stream(connect_stream_twiml("ws://localhost:8000/media", {})).attrib["url"] == (
        "ws://localhost:8000/media"
    )


def test_connect_stream_twiml_accepts_a_parameter_just_under_the_limit() -> None:
    stream = _stream(connect_stream_twiml(STREAM_URL, {"k": "v" * 498}))

    assert len(stream[0].attrib["value"]) == 498


@pytest.mark.parametrize(
    "url",
    ["wss://bot.example.com/media?call=CA1", "wss://bot.example.com/media?", "wss://b/m#frag"],
)
def test_connect_stream_twiml_refuses_a_url_with_a_query_string(url: str) -> None:
    with pytest.raises(ValueError, match="without query string"):
        connect_stream_twiml(url, {})


@pytest.mark.parametrize(
    "url", ["https://bot.example.com/media", "http://bot.example.com/media", "wss://", "/media"]
)
def test_connect_stream_twiml_refuses_a_url_that_is_not_websocket(url: str) -> None:
    with pytest.raises(ValueError, match="ws:// or wss://"):
        connect_stream_twiml(url, {})


def test_connect_stream_twiml_refuses_a_parameter_of_500_characters() -> None:
    with pytest.raises(ValueError, match="under 500 characters, got 500"):
        connect_stream_twiml(STREAM_URL, {"k": "v" * 499})


def test_connect_stream_twiml_refuses_an_empty_parameter_name() -> None:
    with pytest.raises(ValueError, match="parameter names"):
        connect_stream_twiml(STREAM_URL, {"": "v"})


@pytest.mark.parametrize("value", ["a\x00b", "\x1b[31m", "\ud800"])
def test_connect_stream_twiml_refuses_characters_xml_cannot_carry(value: str) -> None:
    with pytest.raises(ValueError, match="XML-invalid"):
        connect_stream_twiml(STREAM_URL, {"v": value})


@pytest.mark.parametrize("url", ["wss://bot.example.com/status", "ftp://x/y", "/status"])
def test_connect_stream_twiml_refuses_a_status_callback_that_is_not_http(url: str) -> None:
    with pytest.raises(ValueError, match="status callback"):
        connect_stream_twiml(STREAM_URL, {}, status_callback_url=url)


def test_say_and_hangup_twiml_says_then_hangs_up() -> None:
    root = ET.fromstring(say_and_hangup_twiml("We are busy. Please call back later."))

    assert root.tag == "Response"
    assert [(child.tag, child.text) for child in root] == [
        ("Say", "We are busy. Please call back later."),
        ("Hangup", None),
    ]


def test_say_and_hangup_twiml_escapes_the_text() -> None:
    root = ET.fromstring(say_and_hangup_twiml("Tom & Jerry <3"))

    assert root[0].text == "Tom & Jerry <3"


@pytest.mark.parametrize("text", ["", "   "])
def test_say_and_hangup_twiml_refuses_empty_text(text: str) -> None:
    with pytest.raises(ValueError, match="text to say"):
        say_and_hangup_twiml(text)


def test_say_and_hangup_twiml_refuses_characters_xml_cannot_carry() -> None:
    with pytest.raises(ValueError, match="XML-invalid"):
        say_and_hangup_twiml("hello\x07")


def test_empty_twiml_is_an_empty_response() -> None:
    root = ET.fromstring(empty_twiml())

    assert (root.tag, list(root), root.attrib) == ("Response", [], {})


def test_dial_twiml_is_exactly_response_dial_number() -> None:
    assert dial_twiml("+15551234567") == "<Response><Dial>+15551234567</Dial></Response>"


def test_dial_twiml_dials_a_sip_uri_with_sip() -> None:
    assert dial_twiml("sip:desk@pbx.example.com;transport=tls") == (
        "<Response><Dial><Sip>sip:desk@pbx.example.com;transport=tls</Sip></Dial></Response>"
    )


@pytest.mark.parametrize(
    ("target", "ok"),
    [
        ("+15551234567", True),
        ("sip:a@b.example.com:5061", True),
        ("5551234", False),
        ("sip:no-host", False),
        ("sip:a@b.com <x>", False),
    ],
)
def test_is_transfer_target_takes_numbers_and_sip_uris(target: str, ok: bool) -> None:
    assert is_transfer_target(target) is ok


@pytest.mark.parametrize(
    "number",
    [
        "15551234567",
        "+05551234567",
        "+1555",
        "+1234567890123456",
        "+1 555 123 4567",
        "+1555123456\n",
        "+\u0661\u0662\u0663\u0664\u0665\u0666\u0667",
        "",
    ],
)
def test_dial_twiml_refuses_a_number_that_is_not_e164(number: str) -> None:
    with pytest.raises(ValueError, match=r"E\.164"):
        dial_twiml(number)
