import json

import pytest

from telephony.errors import ProtocolError, UnknownEvent
from telephony.peer import WriterState
from telephony.protocol import (
    Connected,
    Dtmf,
    Mark,
    Media,
    OutboundClear,
    OutboundMark,
    OutboundMedia,
    Start,
    Stop,
    TwilioEventWriter,
    clear_message,
    mark_message,
    media_message,
    parse_event,
    parse_outbound,
)
from tests.telephony.examples import ACCOUNT_SID, CALL_SID, SILENCE_160, STREAM_SID


def _writer() -> TwilioEventWriter:
    return TwilioEventWriter(stream_sid=STREAM_SID, call_sid=CALL_SID, account_sid=ACCOUNT_SID)


def _started() -> TwilioEventWriter:
    writer = _writer()
    writer.connected()
    writer.start({})
    return writer


def _outbound_kind(message: str | bytes) -> str:
    with pytest.raises(ProtocolError) as caught:
        parse_outbound(message)  # type: ignore[arg-type]
    return caught.value.kind


# --- TwilioEventWriter -------------------------------------------------------------------


def test_writer_connected_is_twilios_first_message() -> None:
    assert json.loads(_writer().connected()) == {
        "event": "connected",
        "protocol": "Call",
        "version": "1.0.0",
    }


def test_writer_start_has_twilios_shape_with_string_sequence_number() -> None:
    writer = _writer()
    writer.connected()

    assert json.loads(writer.start({"token": "t1"})) == {
        "event": "start",
        "sequenceNumber": "1",
        "start": {
            "accountSid": ACCOUNT_SID,
            "streamSid": STREAM_SID,
            "callSid": CALL_SID,
            "tracks": ["inbound"],
            "customParameters": {"token": "t1"},
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        },
        "streamSid": STREAM_SID,
    }


def test_writer_media_sends_counters_as_strings() -> None:
    message = json.loads(_started().media(SILENCE_160, timestamp_ms=40))

    assert message["media"]["chunk"] == "1"
    assert message["media"]["timestamp"] == "40"
    assert message["sequenceNumber"] == "2"


def test_writer_counts_chunks_from_one_and_sequence_across_events() -> None:
    writer = _started()
    first = parse_event(writer.media(SILENCE_160, timestamp_ms=0))
    writer.dtmf("5")
    second = parse_event(writer.media(SILENCE_160, timestamp_ms=20))

    assert isinstance(first, Media) and isinstance(second, Media)
    assert (first.chunk, first.sequence_number) == (1, 2)
    assert (second.chunk, second.sequence_number) == (2, 4)


def test_writer_round_trips_a_whole_call_through_parse_event() -> None:
    writer = _writer()
    frames = [
        writer.connected(),
        writer.start({"token": "t1"}, tracks=("inbound", "outbound")),
        writer.media(SILENCE_160, timestamp_ms=0),
        writer.dtmf("#"),
        writer.mark("m-1"),
        writer.stop(),
    ]

    assert [parse_event(frame) for frame in frames] == [
        Connected(protocol="Call", version="1.0.0"),
        Start(
            1,
            STREAM_SID,
            ACCOUNT_SID,
            CALL_SID,
            ("inbound", "outbound"),
            {"token": "t1"},
            "audio/x-mulaw",
            8000,
            1,
        ),
        Media(2, STREAM_SID, "inbound", 1, 0, SILENCE_160),
        Dtmf(3, STREAM_SID, "inbound_track", "#"),
        Mark(4, STREAM_SID, "m-1"),
        Stop(5, STREAM_SID, ACCOUNT_SID, CALL_SID),
    ]


def test_writer_state_follows_the_call() -> None:
    writer = _writer()
    states = [writer.state]
    writer.connected()
    states.append(writer.state)
    writer.start({})
    states.append(writer.state)
    writer.stop()
    states.append(writer.state)

    assert states == [
        WriterState.NEW,
        WriterState.CONNECTED,
        WriterState.STARTED,
        WriterState.STOPPED,
    ]


def test_writer_refuses_start_before_connected() -> None:
    with pytest.raises(RuntimeError, match="expected the writer to be connected, but it is new"):
        _writer().start({})


def test_writer_refuses_media_before_start() -> None:
    writer = _writer()
    writer.connected()

    with pytest.raises(RuntimeError, match="'media'"):
        writer.media(SILENCE_160, timestamp_ms=0)


def test_writer_refuses_a_second_connected() -> None:
    writer = _writer()
    writer.connected()

    with pytest.raises(RuntimeError):
        writer.connected()


def test_writer_refuses_anything_after_stop() -> None:
    writer = _started()
    writer.stop()

    with pytest.raises(RuntimeError, match="but it is stopped"):
        writer.mark("late")


def test_writer_refusal_does_not_advance_the_sequence() -> None:
    writer = _writer()
    writer.connected()
    with pytest.raises(RuntimeError):
        writer.mark("early")

    assert json.loads(writer.start({}))["sequenceNumber"] == "1"


@pytest.mark.parametrize("digit", ["a", "10", "", "E"])
def test_writer_refuses_a_dtmf_digit_twilio_never_sends(digit: str) -> None:
    with pytest.raises(ValueError, match="DTMF digit"):
        _started().dtmf(digit)


def test_writer_refuses_a_negative_timestamp() -> None:
    with pytest.raises(ValueError, match="timestamp_ms"):
        _started().media(SILENCE_160, timestamp_ms=-1)


def test_writer_refuses_a_start_without_tracks() -> None:
    writer = _writer()
    writer.connected()

    with pytest.raises(ValueError, match="track"):
        writer.start({}, tracks=())


@pytest.mark.parametrize("field", ["stream_sid", "call_sid", "account_sid"])
def test_writer_refuses_an_empty_sid(field: str) -> None:
    sids = {"stream_sid": STREAM_SID, "call_sid": CALL_SID, "account_sid": ACCOUNT_SID}
    sids[field] = ""

    with pytest.raises(ValueError, match=field):
        TwilioEventWriter(**sids)


# --- parse_outbound ----------------------------------------------------------------------


def test_parse_outbound_reads_media() -> None:
    assert parse_outbound(media_message(STREAM_SID, SILENCE_160)) == OutboundMedia(
        stream_sid=STREAM_SID, payload=SILENCE_160
    )


def test_parse_outbound_reads_mark() -> None:
    assert parse_outbound(mark_message(STREAM_SID, "m-1")) == OutboundMark(
        stream_sid=STREAM_SID, name="m-1"
    )


def test_parse_outbound_reads_clear() -> None:
    assert parse_outbound(clear_message(STREAM_SID)) == OutboundClear(stream_sid=STREAM_SID)


def test_parse_outbound_accepts_the_expected_stream() -> None:
    event = parse_outbound(clear_message(STREAM_SID), expected_stream_sid=STREAM_SID)

    assert event == OutboundClear(stream_sid=STREAM_SID)


def test_parse_outbound_refuses_another_stream() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_outbound(clear_message("MZother"), expected_stream_sid=STREAM_SID)

    assert caught.value.kind == "wrong_stream"


@pytest.mark.parametrize(
    "message",
    [
        {"event": "media", "streamSid": STREAM_SID, "media": {"payload": "", "track": "outbound"}},
        {"event": "media", "streamSid": STREAM_SID, "media": {"payload": "", "chunk": "1"}},
        {"event": "media", "streamSid": STREAM_SID, "media": {"payload": "", "timestamp": "0"}},
        {
            "event": "media",
            "streamSid": STREAM_SID,
            "sequenceNumber": "1",
            "media": {"payload": ""},
        },
        {"event": "mark", "streamSid": STREAM_SID, "mark": {"name": "m", "at": 1}},
        {"event": "mark", "streamSid": STREAM_SID, "mark": {"name": "m"}, "extra": None},
        {"event": "clear", "streamSid": STREAM_SID, "clear": {}},
    ],
    ids=[
        "media.track",
        "media.chunk",
        "media.timestamp",
        "sequenceNumber",
        "mark.at",
        "mark-extra",
        "clear-body",
    ],
)
def test_parse_outbound_refuses_any_extra_field(message: dict[str, object]) -> None:
    assert _outbound_kind(json.dumps(message)) == "unexpected_field"


def test_parse_outbound_names_the_unexpected_field() -> None:
    message = {"event": "media", "streamSid": STREAM_SID, "media": {"payload": "", "track": "x"}}

    with pytest.raises(ProtocolError, match=r"media\.track"):
        parse_outbound(json.dumps(message))


@pytest.mark.parametrize(
    "message",
    [
        {"event": "media", "media": {"payload": ""}},
        {"event": "media", "streamSid": STREAM_SID},
        {"event": "media", "streamSid": STREAM_SID, "media": {}},
        {"event": "mark", "streamSid": STREAM_SID, "mark": {}},
        {"event": "clear"},
        {"streamSid": STREAM_SID},
    ],
)
def test_parse_outbound_refuses_a_missing_field(message: dict[str, object]) -> None:
    assert _outbound_kind(json.dumps(message)) == "missing_field"


@pytest.mark.parametrize("name", ["start", "stop", "connected", "Media"])
def test_parse_outbound_refuses_an_event_the_server_may_not_send(name: str) -> None:
    with pytest.raises(UnknownEvent, match="media, mark, clear"):
        parse_outbound(json.dumps({"event": name, "streamSid": STREAM_SID}))


def test_parse_outbound_refuses_bad_base64() -> None:
    message = {"event": "media", "streamSid": STREAM_SID, "media": {"payload": "%%%"}}

    assert _outbound_kind(json.dumps(message)) == "bad_base64"


def test_parse_outbound_refuses_an_empty_mark_name() -> None:
    message = {"event": "mark", "streamSid": STREAM_SID, "mark": {"name": ""}}

    assert _outbound_kind(json.dumps(message)) == "bad_value"


def test_parse_outbound_refuses_a_binary_frame() -> None:
    assert _outbound_kind(clear_message(STREAM_SID).encode()) == "binary_frame"


def test_parse_outbound_refuses_text_that_is_not_json() -> None:
    assert _outbound_kind("clear") == "invalid_json"
