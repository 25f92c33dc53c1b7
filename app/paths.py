"""The URL paths the app serves: Twilio's webhooks, the stream, and the calls API."""

VOICE_PATH = "/twilio/voice"
STATUS_PATH = "/twilio/status"  # the Media Stream's status callback
MEDIA_PATH = "/twilio/media"
CALL_STATUS_PATH = "/twilio/call-status"  # an outbound call's progress (StatusCallback)
AMD_PATH = "/twilio/amd"  # answering-machine verdicts (AsyncAmdStatusCallback)
CALLS_PATH = "/calls"  # POST: place an outbound call (bearer token)
