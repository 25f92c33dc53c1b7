"""The rules a settings object must satisfy: combinations that cannot work are refused
at start, naming the variable to fix (Settings.check, Settings.check_exposure)."""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

from agents.playback import MAX_DUCK_DB
from agents.turns.config import fused_weights
from recordings.s3_location import S3Location
from telephony.twiml import is_transfer_target

if TYPE_CHECKING:
    from app.settings import Settings

__all__ = ["SettingsError", "check_exposure", "check_values"]


class SettingsError(ValueError):
    """An environment variable holds a value its setting cannot take."""


ACCOUNT_SID = re.compile(r"AC[0-9a-f]{32}")


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_values(s: Settings) -> None:
    """Refuse combinations that cannot work, naming the variable to fix."""
    if s.public_url and not s.public_url.startswith(("http://", "https://")):
        raise SettingsError(f"PUBLIC_URL must start with http:// or https://, got {s.public_url!r}")
    if not 20 <= s.chunk_ms <= 1000:
        raise SettingsError(f"CHUNK_MS must be within 20..1000, got {s.chunk_ms}")
    if s.end_of_turn_max_silence_ms < s.end_of_turn_min_silence_ms:
        raise SettingsError("END_OF_TURN_MAX_SILENCE_MS must be >= END_OF_TURN_MIN_SILENCE_MS")
    if not 200 <= s.unit_ms <= 2000:
        raise SettingsError(f"UNIT_MS must be within 200..2000, got {s.unit_ms}")
    if s.turn_judge == "rules":
        raise SettingsError(
            "TURN_JUDGE=rules is gone: its word lists were fitted to our own benchmark "
            "sentences. Use 'words' (the default) or 'voice' (Smart Turn and the silence)"
        )
    if s.turn_judge not in ("words", "voice"):
        raise SettingsError(f"TURN_JUDGE must be 'words' or 'voice', got {s.turn_judge!r}")
    if s.turn_judge_url and s.turn_judge != "words":
        # Set for a judge that would never be asked: say so rather than ignore it.
        raise SettingsError("TURN_JUDGE_URL runs the words judge: it needs TURN_JUDGE=words")
    if s.turn_judge_weights and s.turn_judge != "words":
        raise SettingsError("TURN_JUDGE_WEIGHTS weighs the words judge: it needs TURN_JUDGE=words")
    try:
        fused_weights(s.turn_judge_weights)
    except ValueError as exc:
        raise SettingsError(f"TURN_JUDGE_WEIGHTS: {exc}") from None
    if s.stt_url and not s.stt_url.startswith(("http://", "https://")):
        raise SettingsError("STT_URL must start with http:// or https://")
    if s.stt_url and not s.stt_url_model:
        raise SettingsError("STT_URL_MODEL must name the model STT_URL serves")
    if s.history_turns < 1:
        raise SettingsError(f"HISTORY_TURNS must be >= 1, got {s.history_turns}")
    if s.worker_session_timeout_s <= 0:
        raise SettingsError(
            f"WORKER_SESSION_TIMEOUT_S must be > 0, got {s.worker_session_timeout_s}"
        )
    if s.max_calls < 1:
        raise SettingsError(f"MAX_CALLS must be >= 1, got {s.max_calls}")
    if s.llm_embedded_servers < 0:
        raise SettingsError(f"LLM_EMBEDDED_SERVERS must be >= 0, got {s.llm_embedded_servers}")
    if s.llm_embedded_shared < 0:
        raise SettingsError(f"LLM_EMBEDDED_SHARED must be >= 0, got {s.llm_embedded_shared}")
    if not 0 <= s.llm_embedded_port <= 65535:
        raise SettingsError(f"LLM_EMBEDDED_PORT must be within 0..65535, got {s.llm_embedded_port}")
    fixed = min(max(s.llm_embedded_shared, 1), s.llm_servers)
    if s.llm_embedded_port and s.llm_embedded_port + fixed > 65536:
        raise SettingsError(
            f"LLM_EMBEDDED_PORT {s.llm_embedded_port} leaves no room for "
            f"{fixed} servers on consecutive ports"
        )
    if s.llm_tools not in ("auto", "on", "off"):
        raise SettingsError(f"LLM_TOOLS must be auto, on or off, got {s.llm_tools!r}")
    if s.transfer_key and (len(s.transfer_key) != 1 or s.transfer_key not in "0123456789*#"):
        raise SettingsError(f"TRANSFER_KEY must be one key (0-9, * or #), got {s.transfer_key!r}")
    if s.transfer_to and not is_transfer_target(s.transfer_to):
        raise SettingsError(
            f"TRANSFER_TO must be an E.164 number or a sip: URI, got {s.transfer_to!r}"
        )
    if s.silence_timeout_s < 0:
        raise SettingsError(f"SILENCE_TIMEOUT_S must be >= 0, got {s.silence_timeout_s}")
    if not 0 <= s.hold_duck_db <= MAX_DUCK_DB:
        raise SettingsError(f"HOLD_DUCK_DB must be within 0..{MAX_DUCK_DB:g}, got {s.hold_duck_db}")
    if s.hold_lowered_ms < 0:
        raise SettingsError(f"HOLD_LOWERED_MS must be 0 or more, got {s.hold_lowered_ms}")
    if s.hold_quiet_lowers_ms < 0:
        raise SettingsError(f"HOLD_QUIET_LOWERS_MS must be 0 or more, got {s.hold_quiet_lowers_ms}")
    if s.llm_base_url and not s.llm_model:
        raise SettingsError("LLM_MODEL must name a model when LLM_BASE_URL is set")
    if s.max_call_s <= 0 or s.media_timeout_s <= 0:
        raise SettingsError("MAX_CALL_S and MEDIA_TIMEOUT_S must be > 0")
    if s.call_token_secret and len(s.call_token_secret.encode()) < 16:
        raise SettingsError(
            "CALL_TOKEN_SECRET must be at least 16 bytes (a random 32-character string "
            "will do), or empty to derive it from TWILIO_AUTH_TOKEN"
        )
    if s.http_head_timeout_s <= 0 or s.max_connections < 0:
        raise SettingsError("HTTP_HEAD_TIMEOUT_S must be > 0 and MAX_CONNECTIONS >= 0")
    if s.max_media_rate < 1.0:
        raise SettingsError(f"MAX_MEDIA_RATE must be >= 1.0, got {s.max_media_rate}")
    if s.max_record_mb <= 0:
        raise SettingsError(f"MAX_RECORD_MB must be > 0, got {s.max_record_mb}")
    if s.records_url:
        try:
            S3Location.parse(s.records_url)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
    if s.twilio_account_sid and not ACCOUNT_SID.fullmatch(s.twilio_account_sid):
        raise SettingsError("TWILIO_ACCOUNT_SID must look like AC followed by 32 hex digits")


def check_exposure(s: Settings) -> None:
    """Refuse to serve in a way that lets strangers in (checked by the server only:
    `offhook worker` and the CLI read the same variables without serving Twilio)."""
    if s.twilio_auth_token and not s.public_url:
        raise SettingsError(
            "PUBLIC_URL is required when TWILIO_AUTH_TOKEN is set: signatures are "
            "checked against it, never against the request's Host header"
        )
    if not s.twilio_auth_token and not s.allow_unsigned and not loopback(s.bind_host):
        raise SettingsError(
            f"TWILIO_AUTH_TOKEN is not set, so HOST={s.bind_host} would let anyone "
            "place calls through this server: set TWILIO_AUTH_TOKEN (and PUBLIC_URL), "
            "listen on 127.0.0.1, or set ALLOW_UNSIGNED=1 to accept the risk"
        )
