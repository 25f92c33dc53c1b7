"""The one settings object, read from environment variables.

Every variable is documented in docs/configuration.md, generated from this file
(app/configuration_page.py); `Settings.describe()` prints them with their current values
(secrets masked) for `offhook settings`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.settings_checks import SettingsError, check_exposure, check_values
from app.settings_env import described, env_field, env_values, shown_fields


@dataclass(frozen=True, slots=True)
class Settings:
    # --- server and Twilio -------------------------------------------------------------
    host: str = env_field(
        "HOST",
        "",
        "Interface `offhook serve` listens on. Empty: 0.0.0.0 when TWILIO_AUTH_TOKEN is "
        "set, else 127.0.0.1 (an unsigned server is reachable from this machine only).",
    )
    port: int = env_field("PORT", 8080, "Port `offhook serve` listens on.")
    public_url: str = env_field(
        "PUBLIC_URL",
        "",
        "Public base URL Twilio reaches us at (https://bot.example.com). Used for the "
        "stream URL in TwiML and for signature checks; required with TWILIO_AUTH_TOKEN. "
        "Empty (unsigned local development only): taken from the request's Host header.",
    )
    twilio_auth_token: str = env_field(
        "TWILIO_AUTH_TOKEN",
        "",
        "Twilio auth token. When set, every webhook and stream handshake must carry a "
        "valid X-Twilio-Signature (403 / close 1008 otherwise). Requires PUBLIC_URL.",
        secret=True,
    )
    allow_unsigned: bool = env_field(
        "ALLOW_UNSIGNED",
        False,
        "Let a server without TWILIO_AUTH_TOKEN listen on a non-loopback HOST (anyone who "
        "reaches it can place calls through it). Off: start-up refuses.",
    )
    twilio_account_sid: str = env_field(
        "TWILIO_ACCOUNT_SID",
        "",
        "Twilio account SID. With TWILIO_AUTH_TOKEN it enables Twilio's REST API: hang-up "
        "over REST, transfers, outbound calls. When set, webhooks and streams from any "
        "other account are refused.",
    )
    twilio_api_url: str = env_field(
        "TWILIO_API_URL",
        "https://api.twilio.com",
        "Base URL of Twilio's REST API (an egress proxy, or a fake Twilio in tests).",
    )
    call_token_secret: str = env_field(
        "CALL_TOKEN_SECRET",
        "",
        "Secret for the per-call token passed as a <Parameter> and checked at stream "
        "start. Empty: derived from TWILIO_AUTH_TOKEN, or random per process.",
        secret=True,
    )
    max_calls: int = env_field(
        "MAX_CALLS", 4, "Concurrent calls; further callers hear a busy message."
    )
    max_call_s: float = env_field(
        "MAX_CALL_S",
        3600.0,
        "Longest a call may last, in seconds. 10 s before it (for a limit over 10 s) the "
        "bot says FAREWELL_TEXT and hangs up; at it the stream is closed whatever is under "
        "way.",
    )
    media_timeout_s: float = env_field(
        "MEDIA_TIMEOUT_S",
        5.0,
        "A stream that sends no media for this long is closed (Twilio sends every 20 ms).",
    )
    max_media_rate: float = env_field(
        "MAX_MEDIA_RATE",
        1.5,
        "Caller audio arriving faster than this many times real time (after a 2 s burst) "
        "is a flood: the stream is closed. Raise it on a staging server for "
        "`calls replay --speed`.",
    )
    http_head_timeout_s: float = env_field(
        "HTTP_HEAD_TIMEOUT_S",
        10.0,
        "A connection must send a whole HTTP request head within this many seconds of "
        "opening (or of its previous request): a slow-loris is closed.",
    )
    max_connections: int = env_field(
        "MAX_CONNECTIONS",
        0,
        "Open connections (HTTP and Media Streams together) beyond which new ones are "
        "closed at once. 0: 64 + 4 x MAX_CALLS.",
    )
    # --- conversation ------------------------------------------------------------------
    greeting: str = env_field(
        "GREETING",
        "Hello! Thanks for calling. How can I help you today?",
        "Spoken when a call starts. Empty: the bot waits for the caller.",
    )
    system_prompt: str = env_field(
        "SYSTEM_PROMPT",
        "You are a friendly, helpful phone assistant. Answer in one or two short "
        "sentences of plain spoken English. No lists, no markdown, no emoji. When the "
        "caller says goodbye, say a short goodbye.",
        "The persona / system prompt (overridden by SYSTEM_PROMPT_FILE).",
    )
    system_prompt_file: str = env_field(
        "SYSTEM_PROMPT_FILE", "", "Path of a text file holding the persona / system prompt."
    )
    apology: str = env_field(
        "APOLOGY_TEXT",
        "Sorry, I'm having trouble right now. Could you say that again?",
        "Spoken when a model backend fails mid-call.",
    )
    reprompt: str = env_field(
        "REPROMPT_TEXT",
        "Sorry, I didn't catch that. Could you say it again?",
        "Spoken when the caller said something that could not be made out.",
    )
    farewell: str = env_field(
        "FAREWELL_TEXT",
        "Thanks for calling. Goodbye!",
        "Said when the caller says goodbye, then the bot hangs up (also near MAX_CALL_S and "
        "after an unanswered re-prompt). Empty: the LLM answers a goodbye like any turn.",
    )
    silence_timeout_s: float = env_field(
        "SILENCE_TIMEOUT_S",
        15.0,
        "A caller silent this long after the bot's turn hears REPROMPT_TEXT; silent as "
        "long again, the bot says FAREWELL_TEXT and hangs up. 0: never.",
    )
    transfer_to: str = env_field(
        "TRANSFER_TO",
        "",
        "Where a caller who asks for a person is transferred: an E.164 number or a sip: "
        "URI (needs TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN). Empty: no transfers.",
    )
    transfer_announcement: str = env_field(
        "TRANSFER_ANNOUNCEMENT",
        "Please hold while I transfer you to a person.",
        "Said before a transfer.",
    )
    transfer_unavailable_text: str = env_field(
        "TRANSFER_UNAVAILABLE_TEXT",
        "Sorry, I can't transfer you to a person right now.",
        "Said when a transfer was asked for but cannot be made (no TRANSFER_TO, no REST "
        "credentials, or Twilio refused it).",
    )
    transfer_key: str = env_field(
        "TRANSFER_KEY",
        "",
        "A keypad key (0-9, * or #) that asks for a person. Empty: none.",
    )
    llm_tools: str = env_field(
        "LLM_TOOLS",
        "auto",
        "Offer the LLM the end_call and transfer_call tools: on, off, or auto (on for an "
        "LLM_BASE_URL endpoint until it refuses them; off for the bundled model). Without "
        "tools, a request for a person is heard from the caller's words.",
    )
    outbound_from: str = env_field(
        "OUTBOUND_FROM", "", "Caller ID of outbound calls (a Twilio number, E.164)."
    )
    outbound_greeting: str = env_field(
        "OUTBOUND_GREETING",
        "Hello! This is an automated assistant calling. Do you have a moment?",
        "What an outbound call says once a person answers (`offhook call --greeting` wins).",
    )
    voicemail_message: str = env_field(
        "VOICEMAIL_MESSAGE",
        "",
        "Left after the beep when an answering machine takes an outbound call. Empty: the "
        "bot hangs up.",
    )
    calls_api_token: str = env_field(
        "CALLS_API_TOKEN",
        "",
        "Bearer token for `POST /calls` (placing outbound calls over HTTP). Empty: the "
        "endpoint refuses every request.",
        secret=True,
    )
    history_turns: int = env_field(
        "HISTORY_TURNS", 12, "Conversation turns kept in the LLM context (compact = fast)."
    )
    # --- front end and turn taking -----------------------------------------------------
    denoise: bool = env_field(
        "DENOISE",
        False,
        "RNNoise noise suppression on what Whisper hears. Off: under background voices it "
        "takes words with the noise (WER 10 % -> 31 % at 15 dB babble, "
        "`python -m benchmarks stt`).",
    )
    echo_cancellation: bool = env_field(
        "ECHO_CANCELLATION",
        True,
        "WebRTC AEC3 on caller audio against the bot's own played audio, so a "
        "speakerphone's echo of the bot is not heard as the caller.",
    )
    speech_gate_db: float = env_field(
        "SPEECH_GATE_DB",
        5.0,
        "Speech must stand this many dB above the call's background level (measured per "
        "call) to count, so background voices do not keep a turn open. 0 turns it off.",
    )
    vad_threshold: float = env_field(
        "VAD_THRESHOLD", 0.5, "Silero speech probability that starts speech."
    )
    end_of_turn_threshold: float = env_field(
        "END_OF_TURN_THRESHOLD",
        0.5,
        "With TURN_JUDGE=voice: the Smart Turn probability that calls a turn complete.",
    )
    end_of_turn_min_silence_ms: int = env_field(
        "END_OF_TURN_MIN_SILENCE_MS",
        200,
        "With TURN_JUDGE=voice: the pause that ends a turn Smart Turn is sure of.",
    )
    end_of_turn_max_silence_ms: int = env_field(
        "END_OF_TURN_MAX_SILENCE_MS",
        1000,
        "The pause that ends any other turn (with TURN_JUDGE=words: one it could not score).",
    )
    barge_in_min_speech_ms: int = env_field(
        "BARGE_IN_MIN_SPEECH_MS",
        1000,
        "Caller speech over the bot that interrupts it whatever its words (from speech "
        "onset). The bot's audio stops at the caller's first loud words anyway (a hold); "
        "shorter speech whose words are a backchannel ('mhm', 'okay') lets it go on.",
    )
    hold_duck_db: float = env_field(
        "HOLD_DUCK_DB",
        12.0,
        "While the caller's short words over the bot are judged (a 'mhm', or the start of "
        "an interruption), the bot goes on this many dB quieter (up to 30) instead of "
        "stopping; 0 stops it until the words are judged.",
    )
    hold_lowered_ms: int = env_field(
        "HOLD_LOWERED_MS",
        120,
        "With HOLD_DUCK_DB, a caller still talking this long after their onset silences "
        "the lowered bot until they stop (it may be an interruption); it plays on lowered "
        "while their words are judged. 0 keeps it lowered throughout.",
    )
    hold_quiet_lowers_ms: int = env_field(
        "HOLD_QUIET_LOWERS_MS",
        60,
        "With HOLD_DUCK_DB and HOLD_LOWERED_MS, a bot silenced under a caller plays on "
        "lowered once they have been this quiet (under a caller's level), not ~110 ms after "
        "their last sound when speech detection calls it; 0 waits for speech detection. "
        "The cascade agent's and the duplex gateway's.",
    )
    echo_margin_db: float = env_field(
        "ECHO_MARGIN_DB",
        12.0,
        "Caller audio (after echo cancellation) quieter than the bot's own playing audio "
        "minus this margin is taken for echo of the bot and cannot interrupt it.",
    )
    # --- models ------------------------------------------------------------------------
    model_cache_dir: str = env_field(
        "OFFHOOK_CACHE_DIR",
        str(Path.home() / ".cache" / "offhook"),
        "Folder the bundled model files are assembled into (sha256-checked).",
    )
    stt_model: str = env_field(
        "STT_MODEL",
        "tiny.en",
        "Whisper model: 'tiny.en' (bundled, fastest; WER 16 % over `python -m benchmarks stt`'s "
        "line conditions), 'base' (bundled; 9 %, ~100-180 ms slower per turn, 120-260 ms "
        "more mouth to mouth on a 2-core machine: the choice for noisy callers) or a path "
        "to a CTranslate2 model folder.",
    )
    stt_language: str = env_field("STT_LANGUAGE", "en", "Language spoken by callers.")
    stt_hotwords: str = env_field(
        "STT_HOTWORDS",
        "",
        "Names and words callers are likely to say, as you would write them, comma-separated "
        "('Luigi's, Via Roma, calzone'): Whisper reads them before each turn (faster-whisper's "
        "hotwords; a hosted STT_URL gets them as its `prompt`). tiny.en heard about half such "
        "names with them and a third without; see docs/operations.md for what they cost.",
    )
    stt_url: str = env_field(
        "STT_URL",
        "",
        "An OpenAI-compatible transcription server (its /audio/transcriptions, answering "
        "`verbose_json`: OpenAI's API, a faster-whisper server, vLLM) to hear callers with "
        "instead of the embedded Whisper (STT_MODEL is then not loaded): a larger Whisper "
        "on a GPU hears better. A request over 3 s is a turn not heard (the caller is "
        "asked again); at start, a server that cannot transcribe is a failed start.",
        url=True,
    )
    stt_url_model: str = env_field("STT_URL_MODEL", "whisper-1", "Model name sent to STT_URL.")
    stt_api_key: str = env_field("STT_API_KEY", "", "API key for STT_URL.", secret=True)
    turn_judge: str = env_field(
        "TURN_JUDGE",
        "words",
        "Who decides the caller has finished: 'words' (the embedded SmolLM2 reads the words "
        "so far after the bot's last line and sets the pause, 0.2-1.8 s; ~70 ms per check "
        "on 2 cores; turns it could not score wait END_OF_TURN_MAX_SILENCE_MS; Smart Turn, "
        "which its weights do not count, is not loaded) or 'voice' "
        "(Smart Turn and the silence: the END_OF_TURN_* settings; no words judge loaded). "
        "'rules', the word lists this replaced, is gone: a failed start.",
    )
    turn_judge_url: str = env_field(
        "TURN_JUDGE_URL",
        "",
        "With TURN_JUDGE=words: an OpenAI-compatible server whose /completions returns "
        "`logprobs` (a llama.cpp server, vLLM) to run the words judge on, with a model that "
        "reads ChatML (SmolLM2, Qwen). Empty: the embedded SmolLM2, in process. A check "
        "whose connection or answer takes over 1 s is no score, and that turn is judged "
        "without it; at start, a judge that cannot answer is a failed start.",
        url=True,
    )
    turn_judge_model: str = env_field("TURN_JUDGE_MODEL", "", "Model name sent to TURN_JUDGE_URL.")
    turn_judge_api_key: str = env_field(
        "TURN_JUDGE_API_KEY", "", "API key for TURN_JUDGE_URL.", secret=True
    )
    turn_judge_weights: str = env_field(
        "TURN_JUDGE_WEIGHTS",
        "",
        "With TURN_JUDGE=words: the fused judge's fitted weights, as `python -m benchmarks "
        "judge --stt-url` prints them refitted on a hosted STT's words "
        "('bias=8.8,words=8,smart_turn=0,sure_wait_ms=200,unsure_wait_ms=1800,hearing=0'; "
        "fields left out keep the shipped value). Empty: the shipped weights, fitted on "
        "the embedded tiny.en's words and SmolLM2's scores; for a TURN_JUDGE_URL model, "
        "`judge --judge-url` fits them on its scores.",
    )
    model_threads: int = env_field(
        "MODEL_THREADS", 2, "Threads each CPU model (STT, TTS, LLM) may use."
    )
    llm_base_url: str = env_field(
        "LLM_BASE_URL",
        "",
        "OpenAI-compatible endpoint (https://api.openai.com/v1, a vLLM server, ...). "
        "Empty: `offhook serve` starts the embedded llama.cpp server.",
        url=True,
    )
    llm_model: str = env_field("LLM_MODEL", "", "Model name sent to the LLM endpoint.")
    llm_api_key: str = env_field("LLM_API_KEY", "", "API key for the LLM endpoint.", secret=True)
    llm_max_tokens: int = env_field("LLM_MAX_TOKENS", 80, "Longest reply, in tokens.")
    llm_temperature: float = env_field("LLM_TEMPERATURE", 0.3, "LLM sampling temperature.")
    llm_drafts: bool = env_field(
        "LLM_DRAFTS",
        True,
        "Start writing the reply while the end of turn's pause is waited out; thrown away if "
        "the caller goes on (a hosted LLM bills those tokens too).",
    )
    llm_timeout_s: float = env_field(
        "LLM_TIMEOUT_S",
        8.0,
        "A reply not started within this is a failed backend (the apology). While every "
        "embedded server is being restarted, a reply first waits up to this long for one.",
    )
    llm_gguf: str = env_field(
        "LLM_GGUF", "", "GGUF file for the embedded server. Empty: bundled SmolLM2-135M."
    )
    llm_embedded_port: int = env_field(
        "LLM_EMBEDDED_PORT",
        0,
        "Port of the first embedded llama.cpp server (0: pick a free one). Fixed, it is "
        "for the local workers (`serve --local-workers` sets it and hands them the servers' "
        "per-process key; other processes get 401): calls use it last.",
    )
    llm_embedded_shared: int = env_field(
        "LLM_EMBEDDED_SHARED",
        1,
        "With LLM_EMBEDDED_PORT set: how many embedded servers, on consecutive ports from "
        "it, other processes write on too (`serve --local-workers N` sets one per worker, "
        "at most LLM_EMBEDDED_SERVERS): calls use them last.",
    )
    llm_embedded_servers: int = env_field(
        "LLM_EMBEDDED_SERVERS",
        0,
        "Embedded llama.cpp servers (each writes one reply at a time). 0: one per call "
        "(MAX_CALLS). The first uses MODEL_THREADS threads, the others one each.",
    )
    tts_voice: str = env_field(
        "TTS_VOICE", "", "Piper voice .onnx file. Empty: bundled en_US joe (medium)."
    )
    tts_speed: float = env_field("TTS_SPEED", 1.0, "Speaking rate (1.0 = the voice's own).")
    # --- duplex worker pool -------------------------------------------------------------
    duplex_workers: str = env_field(
        "DUPLEX_WORKERS",
        "",
        "Comma-separated duplex workers (ws://host:22400,...). Empty: every call uses the "
        "in-process cascade.",
    )
    duplex_wait_ms: int = env_field(
        "DUPLEX_WAIT_MS",
        300,
        "How long a new call may wait for a free worker before the cascade takes it.",
    )
    duplex_queue: int = env_field(
        "DUPLEX_QUEUE", 16, "Calls that may wait for a worker at once (beyond: cascade)."
    )
    unit_ms: int = env_field("UNIT_MS", 1000, "Caller audio per duplex unit (200..2000 ms).")
    worker_token: str = env_field(
        "WORKER_TOKEN",
        "",
        "Shared secret between the gateway and its duplex workers, sent at the worker "
        "WebSocket handshake (Authorization: Bearer) and compared in constant time. Set "
        "the same value on both sides; empty: workers take any session (loopback only!).",
        secret=True,
    )
    worker_session_timeout_s: float = env_field(
        "WORKER_SESSION_TIMEOUT_S",
        30.0,
        "A worker closes a session that sends it nothing (idle or paused) for this long.",
    )
    omni_voice_wav: str = env_field(
        "OMNI_VOICE_WAV",
        "",
        "WAV (5-15 s of clear speech) whose voice a `minicpmo` worker speaks with. Empty: "
        "the bundled Piper voice, the cascade's own, so a fallback keeps the same voice.",
    )
    # --- scale-out: many gateways and workers as one system -----------------------------
    redis_url: str = env_field(
        "REDIS_URL",
        "",
        "Redis or Valkey (redis://[:password@]host:6379/0) shared by every gateway and "
        "worker: single-use stream tokens, one stream per CallSid, the worker registry and "
        "its queue, which gateway holds a call. Empty: all of it in this process.",
        url=True,
    )
    gateway_url: str = env_field(
        "GATEWAY_URL",
        "",
        "This gateway's own address as the other gateways reach it (http://10.0.0.5:8080), "
        "for callbacks about a call it holds. Empty: http://HOST:PORT.",
        url=True,
    )
    worker_url: str = env_field(
        "WORKER_URL",
        "",
        "`offhook worker` with REDIS_URL: the address gateways reach this worker at "
        "(ws://10.0.0.7:22400); it registers itself under it and keeps a heartbeat.",
        url=True,
    )
    records_url: str = env_field(
        "RECORDS_URL",
        "",
        "s3://BUCKET/PREFIX: each finished call's record is uploaded there, and "
        "`offhook calls` reads every gateway's calls from it. Endpoint and credentials: "
        "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION. "
        "Empty: records stay in DATA_DIR.",
        url=True,
    )
    drain_timeout_s: float = env_field(
        "DRAIN_TIMEOUT_S",
        3600.0,
        "After SIGTERM, `serve` takes no new calls and exits once its live calls have "
        "ended, or after this many seconds (then the calls still live are cut: with "
        "REDIS_URL they resume on another gateway). Set it to MAX_CALL_S or more.",
    )
    # --- playout -----------------------------------------------------------------------
    chunk_ms: int = env_field(
        "CHUNK_MS",
        100,
        "Bot audio is sent in chunks of this length, each followed by a mark; smaller "
        "chunks make barge-in truncation more exact.",
    )
    # --- recording and logging ---------------------------------------------------------
    data_dir: str = env_field(
        "DATA_DIR", "./data", "Where call records are written (one folder per call under calls/)."
    )
    recording: bool = env_field(
        "RECORDING", True, "Record every call: audio both ways, timeline, transcript, meta."
    )
    mask_caller_number: bool = env_field(
        "MASK_CALLER_NUMBER",
        True,
        "Show callers' numbers masked (+1***4567) in records and logs.",
    )
    redact_dtmf: bool = env_field(
        "REDACT_DTMF",
        False,
        "Keep keypad digits (PINs, card numbers) out of records, logs and the LLM: the "
        "bot hears '(The caller entered 4 digits.)'.",
    )
    max_record_mb: float = env_field(
        "MAX_RECORD_MB",
        200.0,
        "Largest one call's record may grow; audio past it is not written and meta.json "
        "says `truncated`.",
    )
    retention_days: float = env_field(
        "RETENTION_DAYS",
        30.0,
        "Call records older than this are deleted (daily, and by `offhook calls cleanup`).",
    )
    max_storage_gb: float = env_field(
        "MAX_STORAGE_GB", 10.0, "When records exceed this size, the oldest are deleted first."
    )
    log_level: str = env_field("LOG_LEVEL", "INFO", "Python logging level.")

    _token_fallback: str = field(default_factory=lambda: secrets.token_hex(32), repr=False)
    # The embedded llama.cpp servers' API key: random per process (and handed to local
    # workers), so nothing else on the host can use or load them.
    _llm_key: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    def __repr__(self) -> str:
        # Secrets stay out (repr=False); URLs lose their credentials and query strings.
        return f"Settings({shown_fields(self)})"

    @property
    def llm_embedded_api_key(self) -> str:
        """The key the embedded llama.cpp servers ask of every request."""
        return self._llm_key

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from environment variables; keyword overrides win."""
        values = env_values(cls, os.environ if environ is None else environ)
        values.update(overrides)
        settings = cls(**values)
        settings.check()
        return settings

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def check(self) -> None:
        """Refuse combinations that cannot work, naming the variable to fix."""
        check_values(self)

    def check_exposure(self) -> None:
        """Refuse to serve in a way that lets strangers in (checked by the server only:
        `offhook worker` and the CLI read the same variables without serving Twilio)."""
        check_exposure(self)

    @property
    def bind_host(self) -> str:
        """HOST, or the default that fits the signing mode."""
        if self.host:
            return self.host
        return "0.0.0.0" if self.twilio_auth_token else "127.0.0.1"

    @property
    def token_secret(self) -> bytes:
        """Secret for per-call tokens: explicit, else tied to the auth token, else random."""
        if self.call_token_secret:
            return self.call_token_secret.encode()
        if self.twilio_auth_token:
            return b"offhook-call-token:" + self.twilio_auth_token.encode()
        return self._token_fallback.encode()

    @property
    def rest_credentials(self) -> bool:
        """Twilio's REST API can be used (hang-up, transfer, outbound calls)."""
        return bool(self.twilio_account_sid and self.twilio_auth_token)

    @property
    def llm_servers(self) -> int:
        """How many embedded llama.cpp servers to start: LLM_EMBEDDED_SERVERS, or one
        per call."""
        return self.llm_embedded_servers or self.max_calls

    @property
    def connection_limit(self) -> int:
        """MAX_CONNECTIONS, or room for every call's stream and webhooks, health checks
        and scrapes."""
        return self.max_connections or 64 + 4 * self.max_calls

    @property
    def worker_urls(self) -> list[str]:
        return [url.strip() for url in self.duplex_workers.split(",") if url.strip()]

    @property
    def calls_dir(self) -> Path:
        return Path(self.data_dir) / "calls"

    def fingerprint(self) -> str:
        """A short hash of every non-secret setting: which configuration served a call."""
        import hashlib

        rows = [f"{env}={value}" for env, value, _ in Settings.describe(self)]
        return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:12]

    def persona(self) -> str:
        """The system prompt; the server reads it once at start-up (app.services)."""
        if self.system_prompt_file:
            try:
                return Path(self.system_prompt_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise SettingsError(
                    f"SYSTEM_PROMPT_FILE {self.system_prompt_file!r} cannot be read: {exc}"
                ) from None
        return self.system_prompt

    @classmethod
    def describe(cls, current: Settings | None = None) -> list[tuple[str, str, str]]:
        """(variable, value, meaning) for every setting."""
        return described(cls, current)
