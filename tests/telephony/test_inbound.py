import base64
import dataclasses
import json
from collections.abc import Callable

import pytest

from telephony.errors import ProtocolError, UnknownEvent
from telephony.protocol import (
    MAX_MEDIA_PAYLOAD_BYTES,
    MAX_MESSAGE_CHARS,
    Connected,
    Dtmf,
    Mark,
    Media,
    Start,
    Stop,
    parse_event,
)
from tests.telephony import examples
from tests.telephony.examples import ACCOUNT_SID, CALL_SID, SILENCE_160, STREAM_SID

Example = Callable[[], dict[str, object]]


def _set(message: dict[str, object], path: str, value: object) -> str:
    *parents, leaf = path.split(".")
    node = message
    for name in parents:
        node = node[name]  # type: ignore[assignment]
    node[leaf] = value
    return json.dumps(message)


def _delete(message: dict[str, object], path: str) -> str:
    *parents, leaf = path.split(".")
    node = message
    for name in parents:
        node = node[name]  # type: ignore[assignment]
    del node[leaf]
    return json.dumps(message)


def _kind(message: str | bytes) -> str:
    with pytest.raises(ProtocolError) as caught:
        parse_event(message)
    return caught.value.kind


# --- well-formed events -----------------------------------------------------------------


def test_parses_connected() -> None:
    assert parse_event(examples.text(examples.connected())) == Connected(
        protocol="Call", version="1.0.0"
    )


def test_parses_start_from_twilio_example() -> None:
    event = parse_event(examples.text(examples.start()))

    assert event == Start(
        sequence_number=1,
        stream_sid=STREAM_SID,
        account_sid=ACCOUNT_SID,
        call_sid=CALL_SID,
        tracks=("inbound",),
        custom_parameters={"FirstName": "Jane", "LastName": "Doe", "RemoteParty": "Bob"},
        encoding="audio/x-mulaw",
        sample_rate=8000,
        channels=1,
    )


def test_start_parameters_gives_the_custom_parameters() -> None:
    event = parse_event(examples.text(examples.start()))

    assert isinstance(event, Start)
    assert event.parameters["RemoteParty"] == "Bob"
    assert dict(event.parameters) == dict(event.custom_parameters)


def test_start_custom_parameters_are_read_only() -> None:
    event = parse_event(examples.text(examples.start()))

    assert isinstance(event, Start)
    with pytest.raises(TypeError):
        event.custom_parameters["FirstName"] = "Mallory"  # type: ignore[index]


def test_start_keeps_its_own_copy_of_custom_parameters() -> None:
    parameters = {"token": "abc"}
    event = Start(1, STREAM_SID, ACCOUNT_SID, CALL_SID, ("inbound",), parameters, "x", 8000, 1)

    parameters["token"] = "forged"

    assert event.custom_parameters == {"token": "abc"}


def test_start_is_hashable_despite_its_mapping() -> None:
    event = parse_event(examples.text(examples.start()))

    assert hash(event) == hash(parse_event(examples.text(examples.start())))


def test_start_accepts_sample_rate_and_channels_as_strings() -> None:
    message = examples.start()
    _set(message, "start.mediaFormat.sampleRate", "8000")
    event = parse_event(_set(message, "start.mediaFormat.channels", "1"))

    assert isinstance(event, Start)
    assert (event.sample_rate, event.channels) == (8000, 1)


def test_start_without_custom_parameters_has_none() -> None:
    event = parse_event(_delete(examples.start(), "start.customParameters"))

    assert isinstance(event, Start)
    assert event.custom_parameters == {}


def test_start_without_inner_stream_sid_uses_the_outer_one() -> None:
    event = parse_event(_delete(examples.start(), "start.streamSid"))

    assert isinstance(event, Start)
    assert event.stream_sid == STREAM_SID


def test_parses_media_with_numbers_as_strings() -> None:
    event = parse_event(examples.text(examples.media()))

    assert event == Media(
        sequence_number=3,
        stream_sid=STREAM_SID,
        track="inbound",
        chunk=1,
        timestamp_ms=5,
        payload=SILENCE_160,
    )


def test_parses_media_with_numbers_as_numbers() -> None:
    message = examples.media()
    _set(message, "sequenceNumber", 3)
    _set(message, "media.chunk", 1)
    event = parse_event(_set(message, "media.timestamp", 5))

    assert event == parse_event(examples.text(examples.media()))


def test_media_payload_may_be_empty() -> None:
    event = parse_event(examples.text(examples.media(b"")))

    assert isinstance(event, Media)
    assert event.payload == b""


def test_media_payload_may_be_as_large_as_the_cap() -> None:
    event = parse_event(examples.text(examples.media(b"\x7f" * MAX_MEDIA_PAYLOAD_BYTES)))

    assert isinstance(event, Media)
    assert len(event.payload) == MAX_MEDIA_PAYLOAD_BYTES


def test_parses_dtmf() -> None:
    assert parse_event(examples.text(examples.dtmf())) == Dtmf(
        sequence_number=5, stream_sid=STREAM_SID, track="inbound_track", digit="1"
    )


@pytest.mark.parametrize("digit", list("0123456789*#ABCD"))
def test_dtmf_accepts_every_keypad_digit(digit: str) -> None:
    event = parse_event(_set(examples.dtmf(), "dtmf.digit", digit))

    assert isinstance(event, Dtmf)
    assert event.digit == digit


def test_parses_mark() -> None:
    assert parse_event(examples.text(examples.mark())) == Mark(
        sequence_number=4, stream_sid=STREAM_SID, name="my label"
    )


def test_parses_stop() -> None:
    assert parse_event(examples.text(examples.stop())) == Stop(
        sequence_number=5, stream_sid=STREAM_SID, account_sid=ACCOUNT_SID, call_sid=CALL_SID
    )


@pytest.mark.parametrize(
    "example",
    [
        examples.connected,
        examples.start,
        examples.media,
        examples.dtmf,
        examples.mark,
        examples.stop,
    ],
)
def test_tolerates_fields_twilio_may_add(example: Example) -> None:
    plain = parse_event(examples.text(example()))
    message = example()
    message["newTopLevelField"] = {"anything": [1, 2]}
    for value in message.values():
        if isinstance(value, dict):
            value["newNestedField"] = "x"

    assert parse_event(json.dumps(message)) == plain


def test_events_are_frozen() -> None:
    event = parse_event(examples.text(examples.media()))

    with pytest.raises(dataclasses.FrozenInstanceError):
        event.chunk = 2  # type: ignore[misc]


def test_accepts_a_message_of_exactly_the_maximum_size() -> None:
    message = examples.mark()
    base = len(_set(message, "padding", ""))
    text = _set(message, "padding", "x" * (MAX_MESSAGE_CHARS - base))

    assert len(text) == MAX_MESSAGE_CHARS
    assert isinstance(parse_event(text), Mark)


# --- frames that are not a JSON object --------------------------------------------------


def test_refuses_a_binary_frame() -> None:
    assert _kind(examples.text(examples.media()).encode()) == "binary_frame"


def test_refuses_a_message_over_the_maximum_size() -> None:
    message = examples.mark()
    base = len(_set(message, "padding", ""))
    text = _set(message, "padding", "x" * (MAX_MESSAGE_CHARS - base + 1))

    assert _kind(text) == "message_too_large"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "{",
        '{"event": "mark",}',
        '{"event": NaN}',
        '{"n": Infinity}',
        "[" * 30_000 + "]" * 30_000,
        '{"n": ' + "9" * 5000 + "}",
    ],
    ids=["empty", "words", "truncated", "trailing-comma", "nan", "infinity", "deep", "huge-int"],
)
def test_refuses_text_that_is_not_json(text: str) -> None:
    assert _kind(text) == "invalid_json"


@pytest.mark.parametrize("text", ["[]", '"media"', "42", "null", "true"])
def test_refuses_json_that_is_not_an_object(text: str) -> None:
    assert _kind(text) == "bad_type"


def test_refuses_a_frame_that_is_neither_text_nor_bytes() -> None:
    with pytest.raises(TypeError):
        parse_event(42)  # type: ignore[arg-type]


# --- the event name ---------------------------------------------------------------------


def test_refuses_a_message_without_event() -> None:
    assert _kind(_delete(examples.media(), "event")) == "missing_field"


def test_refuses_an_event_name_that_is_not_a_string() -> None:
    assert _kind(_set(examples.media(), "event", 7)) == "bad_type"


@pytest.mark.parametrize("name", ["Media", "clear", "closed", ""])
def test_refuses_an_unknown_event(name: str) -> None:
    with pytest.raises(UnknownEvent) as caught:
        parse_event(_set(examples.media(), "event", name))

    assert caught.value.kind == "unknown_event"
    assert caught.value.event == name


def test_unknown_event_message_lists_the_known_events() -> None:
    with pytest.raises(UnknownEvent, match="connected, start, media, dtmf, mark, stop"):
        parse_event(_set(examples.media(), "event", "typing"))


def test_error_message_clips_a_huge_offending_value() -> None:
    with pytest.raises(UnknownEvent) as caught:
        parse_event(_set(examples.media(), "event", "x" * 10_000))

    assert len(str(caught.value)) < 300


# --- fields ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("example", "path"),
    [
        (examples.connected, "protocol"),
        (examples.connected, "version"),
        (examples.start, "sequenceNumber"),
        (examples.start, "streamSid"),
        (examples.start, "start"),
        (examples.start, "start.accountSid"),
        (examples.start, "start.callSid"),
        (examples.start, "start.tracks"),
        (examples.start, "start.mediaFormat"),
        (examples.start, "start.mediaFormat.encoding"),
        (examples.start, "start.mediaFormat.sampleRate"),
        (examples.start, "start.mediaFormat.channels"),
        (examples.media, "sequenceNumber"),
        (examples.media, "streamSid"),
        (examples.media, "media"),
        (examples.media, "media.track"),
        (examples.media, "media.chunk"),
        (examples.media, "media.timestamp"),
        (examples.media, "media.payload"),
        (examples.dtmf, "sequenceNumber"),
        (examples.dtmf, "streamSid"),
        (examples.dtmf, "dtmf.track"),
        (examples.dtmf, "dtmf.digit"),
        (examples.mark, "sequenceNumber"),
        (examples.mark, "streamSid"),
        (examples.mark, "mark.name"),
        (examples.stop, "sequenceNumber"),
        (examples.stop, "streamSid"),
        (examples.stop, "stop.accountSid"),
        (examples.stop, "stop.callSid"),
    ],
)
def test_refuses_a_missing_field(example: Example, path: str) -> None:
    with pytest.raises(ProtocolError, match=f"'{path}'") as caught:
        parse_event(_delete(example(), path))

    assert caught.value.kind == "missing_field"


@pytest.mark.parametrize(
    ("example", "path", "value"),
    [
        (examples.connected, "protocol", 1),
        (examples.start, "streamSid", None),
        (examples.start, "start", "x"),
        (examples.start, "start.callSid", ["CA1"]),
        (examples.start, "start.tracks", "inbound"),
        (examples.start, "start.tracks", ["inbound", 2]),
        (examples.start, "start.customParameters", ["a"]),
        (examples.start, "start.customParameters", {"a": 1}),
        (examples.start, "start.mediaFormat", "audio/x-mulaw"),
        (examples.start, "start.mediaFormat.sampleRate", 8000.0),
        (examples.media, "media", []),
        (examples.media, "media.payload", 123),
        (examples.media, "media.track", None),
        (examples.dtmf, "dtmf.digit", 1),
        (examples.mark, "mark.name", {}),
        (examples.stop, "stop", None),
    ],
)
def test_refuses_a_field_of_the_wrong_type(example: Example, path: str, value: object) -> None:
    assert _kind(_set(example(), path, value)) == "bad_type"


@pytest.mark.parametrize(
    "value", ["abc", "1.5", 1.5, "", " 1", "+1", "1e3", "\u0661", "0x10", True, None, [1]]
)
def test_refuses_a_counter_that_is_not_a_number(value: object) -> None:
    assert _kind(_set(examples.media(), "media.chunk", value)) == "bad_type"


@pytest.mark.parametrize("path", ["sequenceNumber", "media.chunk", "media.timestamp"])
@pytest.mark.parametrize("value", ["-1", -1, "-20"])
def test_refuses_a_negative_counter(path: str, value: object) -> None:
    assert _kind(_set(examples.media(), path, value)) == "bad_value"


@pytest.mark.parametrize("value", ["9" * 20, 2**63])
def test_refuses_an_absurdly_large_counter(value: object) -> None:
    assert _kind(_set(examples.media(), "sequenceNumber", value)) == "bad_value"


def test_counter_error_names_the_field_and_what_arrived() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_event(_set(examples.media(), "media.chunk", "abc"))

    assert "'media.chunk'" in str(caught.value)
    assert "non-negative integer" in str(caught.value)
    assert "'abc'" in str(caught.value)


@pytest.mark.parametrize("example", [examples.start, examples.media, examples.stop])
def test_refuses_an_empty_stream_sid(example: Example) -> None:
    assert _kind(_set(example(), "streamSid", "")) == "bad_value"


def test_refuses_a_start_with_no_tracks() -> None:
    assert _kind(_set(examples.start(), "start.tracks", [])) == "bad_value"


def test_refuses_a_start_whose_two_stream_sids_differ() -> None:
    assert _kind(_set(examples.start(), "start.streamSid", "MZother")) == "wrong_stream"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("start.mediaFormat.encoding", "audio/l16"),
        ("start.mediaFormat.sampleRate", 16000),
        ("start.mediaFormat.sampleRate", "16000"),
        ("start.mediaFormat.channels", 2),
    ],
)
def test_refuses_a_media_format_other_than_mulaw_8k_mono(path: str, value: object) -> None:
    assert _kind(_set(examples.start(), path, value)) == "unsupported_format"


@pytest.mark.parametrize("payload", ["not base64!", "abc", "ab=c", "a===", "\u00e9" * 4])
def test_refuses_a_payload_that_is_not_base64(payload: str) -> None:
    assert _kind(_set(examples.media(), "media.payload", payload)) == "bad_base64"


def test_refuses_a_payload_over_the_cap() -> None:
    payload = base64.b64encode(b"\xff" * (MAX_MEDIA_PAYLOAD_BYTES + 1)).decode()

    assert _kind(_set(examples.media(), "media.payload", payload)) == "payload_too_large"


@pytest.mark.parametrize("digit", ["a", "E", "10", "", " ", "\u0661"])
def test_refuses_a_dtmf_digit_not_on_a_keypad(digit: str) -> None:
    assert _kind(_set(examples.dtmf(), "dtmf.digit", digit)) == "bad_value"
