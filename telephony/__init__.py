"""Twilio at the edge: Media Streams messages, signatures, TwiML and call control."""
