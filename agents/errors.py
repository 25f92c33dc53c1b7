"""Errors raised by the conversation brains.

AgentError
├── BackendError          a model backend failed (vendor errors mapped here)
│   ├── SpeechToTextError
│   ├── LanguageModelError
│   │   └── LanguageModelUnreachable
│   └── TextToSpeechError
└── BackendUnavailable    a backend could not be started or reached at all
"""


class AgentError(Exception):
    """Base class of the agents package."""


class BackendError(AgentError):
    """A model backend failed while serving a call."""

    stage = "backend"


class SpeechToTextError(BackendError):
    stage = "stt"


class LanguageModelError(BackendError):
    stage = "llm"


class LanguageModelUnreachable(LanguageModelError):
    """The LLM's endpoint could not be reached, or dropped the connection: the server
    may be dead or restarting. Asking another (or the restarted one) may well work."""


class TextToSpeechError(BackendError):
    stage = "tts"


class BackendUnavailable(AgentError):
    """A backend could not be started or reached."""
