"""The gateway ↔ worker protocol's unit message: audio, and the gateway's speech windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.duplex.protocol import ProtocolViolation, Unit, decode, encode, pcm16_bytes


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
