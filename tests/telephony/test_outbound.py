import base64
import json

import pytest

from telephony.protocol import clear_message, mark_message, media_message
from tests.telephony.examples import SILENCE_160, STREAM_SID


def test_media_message_is_exactly_twilios_shape() -> None:
    payload = base64.b64encode(SILENCE_160).decode()

    assert media_message(STREAM_SID, SILENCE_160) == (
        '{"event":"media","streamSid":"' + STREAM_SID + '","media":{"payload":"' + payload + '"}}'
    )


def test_media_message_carries_no_track_chunk_or_timestamp() -> None:
    message = json.loads(media_message(STREAM_SID, SILENCE_160))

    assert set(message) == {"event", "streamSid", "media"}
    assert set(message["media"]) == {"payload"}


def test_media_message_may_carry_any_length_of_audio() -> None:
    audio = bytes(range(256)) * 100

    message = json.loads(media_message(STREAM_SID, audio))

    assert base64.b64decode(message["media"]["payload"]) == audio


def test_media_message_accepts_empty_audio() -> None:
    assert json.loads(media_message(STREAM_SID, b""))["media"] == {"payload": ""}


def test_mark_message_is_exactly_twilios_shape() -> None:
    assert mark_message(STREAM_SID, "chunk-7") == (
        '{"event":"mark","streamSid":"' + STREAM_SID + '","mark":{"name":"chunk-7"}}'
    )


def test_mark_message_escapes_the_name_as_json() -> None:
    name = 'quote " and \\ and é'

    assert json.loads(mark_message(STREAM_SID, name))["mark"]["name"] == name


def test_clear_message_is_exactly_twilios_shape() -> None:
    assert clear_message(STREAM_SID) == '{"event":"clear","streamSid":"' + STREAM_SID + '"}'


def test_media_message_refuses_an_empty_stream_sid() -> None:
    with pytest.raises(ValueError, match="stream SID"):
        media_message("", SILENCE_160)


def test_mark_message_refuses_an_empty_stream_sid() -> None:
    with pytest.raises(ValueError, match="stream SID"):
        mark_message("", "m1")


def test_clear_message_refuses_an_empty_stream_sid() -> None:
    with pytest.raises(ValueError, match="stream SID"):
        clear_message("")


def test_mark_message_refuses_an_empty_name() -> None:
    with pytest.raises(ValueError, match="mark name"):
        mark_message(STREAM_SID, "")
