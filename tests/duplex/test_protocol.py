"""The gateway ↔ worker protocol: every message checked for types, ranges and sizes."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from agents.duplex.protocol import (
    ProtocolViolation,
    Result,
    Unit,
    decode,
    encode,
    pcm16_bytes,
)


def test_a_unit_carries_the_gateways_speech_windows_both_ways() -> None:
    sent = Unit(seq=3, audio=pcm16_bytes(np.zeros(160)), speech=(0.0, 0.25, 1.0))
    received = decode(encode(sent))
    assert received == sent
    assert isinstance(received, Unit) and received.speech == (0.0, 0.25, 1.0)


def test_a_unit_without_speech_windows_is_still_a_unit() -> None:
    body = {"type": "unit", "seq": 1, "audio": ""}
    received = decode(json.dumps(body))
    assert isinstance(received, Unit) and received.speech is None


@pytest.mark.parametrize("bad", [[1.5], ["yes"], "0.5", [None]])
def test_speech_windows_must_be_probabilities(bad: object) -> None:
    body = {"type": "unit", "seq": 1, "audio": "", "speech": bad}
    with pytest.raises(ProtocolViolation, match="speech"):
        decode(json.dumps(body))


AUDIO_1S = pcm16_bytes(np.zeros(16000))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"type": "unit", "seq": -1, "audio": ""}, "seq"),
        ({"type": "unit", "seq": True, "audio": ""}, "seq"),
        ({"type": "unit", "seq": "1", "audio": ""}, "seq"),
        ({"type": "unit", "seq": 1, "audio": 5}, "audio"),
        ({"type": "unit", "seq": 1, "audio": "AA=="}, "audio"),  # 1 byte: odd
        ({"type": "prepare", "system_prompt": 7}, "system_prompt"),
        ({"type": "prepare", "system_prompt": "x" * 40_000}, "system_prompt"),
        ({"type": "prepare", "system_prompt": "", "unit_ms": 60_000}, "unit_ms"),
        ({"type": "prepare", "system_prompt": "", "history": [{"role": "god"}]}, "history"),
        ({"type": "prepare", "system_prompt": "", "config": {"a": [1]}}, "config"),
        ({"type": "keypad", "digits": ""}, "digits"),
        ({"type": "keypad", "digits": "12; rm"}, "digits"),
        ({"type": "stopped", "reason": 3}, "reason"),
        ({"type": "error", "message": "x", "fatal": "yes"}, "fatal"),
        ({"type": "prepared", "worker_id": "w", "backend": "b", "unit_ms": 0}, "unit_ms"),
    ],
)
def test_a_message_out_of_type_or_range_is_a_violation(body: dict[str, object], field: str) -> None:
    with pytest.raises(ProtocolViolation, match=field):
        decode(json.dumps(body))


def test_an_oversized_unit_is_refused_on_both_sides() -> None:
    too_long = pcm16_bytes(np.zeros(2 * 16000 + 2))  # over 2 s
    with pytest.raises(ProtocolViolation, match="audio"):
        Unit(seq=1, audio=too_long)  # the gateway cannot send it
    body = {"type": "unit", "seq": 1, "audio": base64.b64encode(too_long).decode()}
    with pytest.raises(ProtocolViolation, match="audio"):
        decode(json.dumps(body))  # the worker does not take it


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"action": "shout"}, "action"),
        ({"seq": -3}, "seq"),
        ({"sample_rate": 12345}, "sample_rate"),
        ({"sample_rate": "24000"}, "sample_rate"),
        ({"text": ["hello"]}, "text"),
        ({"text": "x" * 5000}, "text"),
        ({"end_of_turn": 1}, "end_of_turn"),
        ({"yielded": "no"}, "yielded"),
        ({"timings": {"unit": -5}}, "timings"),
        ({"timings": {"unit": "fast"}}, "timings"),
        ({"context_len": -1}, "context_len"),
        ({"action": "listen", "audio": base64.b64encode(AUDIO_1S).decode()}, "audio"),
        ({"audio": base64.b64encode(b"\x00" * (16000 * 2 * 31)).decode()}, "audio"),
    ],
)
def test_a_result_out_of_type_or_range_is_a_violation(
    changes: dict[str, object], field: str
) -> None:
    body: dict[str, object] = {"type": "result", "seq": 1, "action": "speak"} | changes
    with pytest.raises(ProtocolViolation, match=field):
        decode(json.dumps(body))


def test_a_valid_result_round_trips() -> None:
    result = Result(
        seq=4,
        action="speak",
        text="Hello.",
        audio=AUDIO_1S,
        sample_rate=24000,
        end_of_turn=True,
        timings={"prefill": 12.5, "generate": 80},
        context_len=1234,
    )
    assert decode(encode(result)) == result


def test_json_nested_too_deeply_is_a_protocol_violation_not_a_crash() -> None:
    from agents.duplex.protocol import ProtocolViolation, decode

    with pytest.raises(ProtocolViolation, match="nested too deeply"):
        decode("[" * 100_000 + "]" * 100_000)
