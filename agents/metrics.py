"""The metrics agents record, as a Protocol: agents never import the app's Metrics.

`app.metrics.Metrics` (which owns the Prometheus registry) satisfies it structurally.
The members are read-only so a subclass or a double may narrow them.
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import Counter, Histogram


class AgentMetrics(Protocol):
    """The counters and latency histograms the cascade agent updates during a call."""

    @property
    def barge_ins(self) -> Counter: ...

    @property
    def backchannels(self) -> Counter: ...

    @property
    def errors(self) -> Counter:
        """Failures, labelled by `stage`."""
        ...

    @property
    def end_of_turn_seconds(self) -> Histogram: ...

    @property
    def stt_seconds(self) -> Histogram: ...

    @property
    def llm_first_token_seconds(self) -> Histogram: ...

    @property
    def tts_first_audio_seconds(self) -> Histogram: ...

    @property
    def mouth_to_mouth_seconds(self) -> Histogram: ...
