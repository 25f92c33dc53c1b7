"""The settings agents read, as Protocols: agents never import the app's Settings.

`app.settings.Settings` satisfies every one of these structurally; so does any other
object with the same read-only attributes (a test double, a bench's own config). The
members are properties so a frozen dataclass matches them.
"""

from __future__ import annotations

from typing import Any, Protocol, Self
from urllib.parse import urlsplit, urlunsplit

from agents.turns.settings import TurnSettings


def shown_url(url: str) -> str:
    """`url` fit for a log, a listing or an error message: user:password@ and ?query (API
    keys ride in both) replaced by ***, with or without a scheme."""
    parts = urlsplit(url if "//" in url else f"//{url}")
    host = parts.netloc.rpartition("@")[2]
    netloc = f"***@{host}" if "@" in parts.netloc else host
    query = "***" if parts.query else ""
    shown = urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    return shown if "//" in url else shown.removeprefix("//")


class ModelSettings(Protocol):
    """What `agents.loading.load_models` reads: where the models are and how to run them."""

    @property
    def model_cache_dir(self) -> str: ...

    @property
    def model_threads(self) -> int: ...

    @property
    def stt_model(self) -> str: ...

    @property
    def stt_language(self) -> str: ...

    @property
    def stt_hotwords(self) -> str: ...

    @property
    def stt_url(self) -> str: ...

    @property
    def stt_url_model(self) -> str: ...

    @property
    def stt_api_key(self) -> str: ...

    @property
    def turn_judge(self) -> str: ...

    @property
    def turn_judge_url(self) -> str: ...

    @property
    def turn_judge_model(self) -> str: ...

    @property
    def turn_judge_api_key(self) -> str: ...

    @property
    def turn_judge_weights(self) -> str: ...

    @property
    def tts_voice(self) -> str: ...

    @property
    def tts_speed(self) -> float: ...

    @property
    def llm_base_url(self) -> str: ...

    @property
    def llm_model(self) -> str: ...

    @property
    def llm_api_key(self) -> str: ...

    @property
    def llm_max_tokens(self) -> int: ...

    @property
    def llm_temperature(self) -> float: ...

    @property
    def llm_timeout_s(self) -> float: ...

    @property
    def llm_gguf(self) -> str: ...

    @property
    def llm_tools(self) -> str:
        """auto, on or off: whether the LLM is offered the call's tools."""
        ...

    @property
    def llm_embedded_port(self) -> int: ...

    @property
    def llm_embedded_api_key(self) -> str:
        """The key the embedded llama.cpp servers ask of every request."""
        ...

    @property
    def llm_embedded_shared(self) -> int:
        """With a fixed port: the servers from it other processes write on."""
        ...

    @property
    def llm_servers(self) -> int:
        """How many embedded llama.cpp servers to start (with no LLM_BASE_URL)."""
        ...

    @property
    def greeting(self) -> str: ...

    @property
    def apology(self) -> str: ...

    @property
    def reprompt(self) -> str: ...

    @property
    def farewell(self) -> str: ...

    def persona(self) -> str:
        """The system prompt."""
        ...


class AgentSettings(ModelSettings, TurnSettings, Protocol):
    """What the duplex cascade backend (and so `offhook worker`) reads: the models, the
    turn taking, and these."""

    @property
    def vad_threshold(self) -> float: ...

    @property
    def history_turns(self) -> int: ...


class EmbeddedLlmSettings(Protocol):
    """What `agents.duplex.local.share_embedded_llm` reads and changes."""

    @property
    def llm_base_url(self) -> str: ...

    @property
    def llm_embedded_port(self) -> int: ...

    @property
    def llm_servers(self) -> int: ...

    @property
    def llm_embedded_api_key(self) -> str: ...

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` applied."""
        ...


class WorkerSettings(AgentSettings, Protocol):
    """What `offhook worker` reads beyond the cascade backend's settings."""

    @property
    def worker_token(self) -> str: ...

    @property
    def worker_session_timeout_s(self) -> float: ...

    @property
    def omni_voice_wav(self) -> str: ...

    @property
    def redis_url(self) -> str:
        """The worker registry (empty: gateways list the worker in DUPLEX_WORKERS)."""
        ...

    @property
    def worker_url(self) -> str:
        """The address gateways reach this worker at, registered under REDIS_URL."""
        ...
