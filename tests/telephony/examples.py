"""Twilio-shaped messages, as in Twilio's Media Streams documentation.

Functions, not constants: each test gets fresh dicts it may mutate.
"""

import base64
import json

STREAM_SID = "MZ18ad3ab5a668481ce02b83e7395059f0"
ACCOUNT_SID = "AC25e16e9a716a4a1786a7c83f58e30482"
CALL_SID = "CA1f4b9d2e0a5c4e3f8b7a6d5c4b3a2f1e"
SILENCE_160 = b"\xff" * 160  # 20 ms of mu-law silence


def connected() -> dict[str, object]:
    return {"event": "connected", "protocol": "Call", "version": "1.0.0"}


def start() -> dict[str, object]:
    return {
        "event": "start",
        "sequenceNumber": "1",
        "start": {
            "accountSid": ACCOUNT_SID,
            "streamSid": STREAM_SID,
            "callSid": CALL_SID,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"FirstName": "Jane", "LastName": "Doe", "RemoteParty": "Bob"},
        },
        "streamSid": STREAM_SID,
    }


def media(payload: bytes = SILENCE_160) -> dict[str, object]:
    return {
        "event": "media",
        "sequenceNumber": "3",
        "media": {
            "track": "inbound",
            "chunk": "1",
            "timestamp": "5",
            "payload": base64.b64encode(payload).decode("ascii"),
        },
        "streamSid": STREAM_SID,
    }


def dtmf() -> dict[str, object]:
    return {
        "event": "dtmf",
        "streamSid": STREAM_SID,
        "sequenceNumber": "5",
        "dtmf": {"track": "inbound_track", "digit": "1"},
    }


def mark() -> dict[str, object]:
    return {
        "event": "mark",
        "sequenceNumber": "4",
        "streamSid": STREAM_SID,
        "mark": {"name": "my label"},
    }


def stop() -> dict[str, object]:
    return {
        "event": "stop",
        "sequenceNumber": "5",
        "streamSid": STREAM_SID,
        "stop": {"accountSid": ACCOUNT_SID, "callSid": CALL_SID},
    }


def text(message: dict[str, object]) -> str:
    return json.dumps(message)
