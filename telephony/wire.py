"""Fixed facts of the Twilio Media Streams wire format, shared by both directions."""

from typing import Final

# Twilio documents no frame size; observed frames are 160 bytes (20 ms). The caps bound
# what one hostile or broken peer can make us decode: 2 s of audio per frame.
MAX_MESSAGE_CHARS: Final = 64_000
MAX_MEDIA_PAYLOAD_BYTES: Final = 16_000

# The only format a bidirectional <Connect><Stream> carries.
MULAW_ENCODING: Final = "audio/x-mulaw"
SAMPLE_RATE_HZ: Final = 8000
CHANNELS: Final = 1

DTMF_DIGITS: Final = frozenset("0123456789*#ABCD")

INBOUND_EVENTS: Final = ("connected", "start", "media", "dtmf", "mark", "stop")
OUTBOUND_EVENTS: Final = ("media", "mark", "clear")
