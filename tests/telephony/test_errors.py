import pytest

from telephony.errors import (
    CallControlError,
    ProtocolError,
    ProtocolErrorKind,
    SignatureError,
    TelephonyError,
    UnknownEvent,
)


def test_every_error_is_a_telephony_error() -> None:
    for error in (ProtocolError, UnknownEvent, SignatureError, CallControlError):
        assert issubclass(error, TelephonyError)


def test_unknown_event_is_a_protocol_error() -> None:
    assert issubclass(UnknownEvent, ProtocolError)


def test_protocol_error_kind_compares_equal_to_its_label() -> None:
    error = ProtocolError("bad", kind="wrong_stream")

    assert error.kind == "wrong_stream"
    assert error.kind is ProtocolErrorKind.WRONG_STREAM


def test_protocol_error_kind_formats_as_the_bare_label() -> None:
    assert f"{ProtocolError('bad', kind='out_of_order').kind}" == "out_of_order"


def test_protocol_error_refuses_a_label_outside_the_closed_set() -> None:
    with pytest.raises(ValueError):
        ProtocolError("bad", kind="whatever the peer said")


def test_protocol_error_keeps_its_message() -> None:
    assert str(ProtocolError("expected x, got y", kind="bad_type")) == "expected x, got y"


def test_unknown_event_names_the_event_and_the_known_ones() -> None:
    error = UnknownEvent("typing", ["media", "mark"])

    assert error.event == "typing"
    assert error.kind == "unknown_event"
    assert str(error) == "expected event to be one of media, mark; got 'typing'"


def test_call_control_error_carries_status_and_code() -> None:
    error = CallControlError("failed", status=400, code=21220)

    assert (error.status, error.code) == (400, 21220)


def test_call_control_error_status_and_code_default_to_none() -> None:
    error = CallControlError("network down")

    assert (error.status, error.code) == (None, None)
