"""Prometheus metrics, on a registry owned by the app (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Seconds; phone latency lives between 50 ms and a few seconds.
_LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5, 2, 3, 5, 10)
# A model job's queue wait is mostly nothing; on a busy box, tens to hundreds of ms.
_QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, *_LATENCY_BUCKETS)

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.active_calls = Gauge("offhook_active_calls", "Calls in progress.", registry=r)
        self.calls = Counter(
            "offhook_calls", "Calls handled, by how they ended.", ["outcome"], registry=r
        )
        self.rejected_calls = Counter(
            "offhook_rejected_calls", "Calls refused, by reason.", ["reason"], registry=r
        )
        self.end_of_turn_seconds = self._histogram(
            "offhook_end_of_turn_seconds", "Caller speech end to end-of-turn decision."
        )
        self.stt_seconds = self._histogram("offhook_stt_seconds", "Speech-to-text time per turn.")
        self.llm_first_token_seconds = self._histogram(
            "offhook_llm_first_token_seconds", "Reply start to the LLM's first token."
        )
        self.tts_first_audio_seconds = self._histogram(
            "offhook_tts_first_audio_seconds", "Reply start to the first synthesised audio."
        )
        self.mouth_to_mouth_seconds = self._histogram(
            "offhook_mouth_to_mouth_seconds",
            "Caller speech end to the reply's first audio playing (call clock).",
        )
        self.barge_ins = Counter(
            "offhook_barge_ins", "Caller interruptions (clear sent).", registry=r
        )
        self.backchannels = Counter(
            "offhook_backchannels",
            "Short caller speech over the bot that did not stop it.",
            registry=r,
        )
        self.errors = Counter("offhook_errors", "Failures, by stage.", ["stage"], registry=r)
        self.protocol_errors = Counter(
            "offhook_protocol_errors",
            "Invalid messages from Twilio, by kind.",
            ["kind"],
            registry=r,
        )
        self.dropped = Counter(
            "offhook_dropped",
            "Input a call refused to queue, by what (caller_audio, agent_input, dtmf): "
            "a stalled stage or a flooding peer.",
            ["what"],
            registry=r,
        )
        self.frontend_seconds = Counter(
            "offhook_frontend_cpu_seconds", "Time spent in the audio front end.", registry=r
        )
        # The model scheduler's (agents/scheduler.py) hooks feed these.
        self.model_queue_seconds = Histogram(
            "offhook_model_queue_seconds",
            "A model job's wait for a model thread, by stage (stt, end_of_turn, tts).",
            ["stage"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        self.model_run_seconds = Histogram(
            "offhook_model_run_seconds",
            "A model job's time on its model thread, by stage.",
            ["stage"],
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )

        self.llm_restarts = Counter(
            "offhook_llm_restarts",
            "Embedded LLM servers restarted after they died (crash, OOM kill, SIGKILL).",
            registry=r,
        )
        # Set to the models' LLM health once they are loaded (app.main).
        self.llm_ready = Gauge(
            "offhook_llm_ready", "1 while some LLM can answer a reply, else 0.", registry=r
        )
        self.gc_seconds = Histogram(
            "offhook_gc_pause_seconds",
            "Full garbage-collection passes after calls end (app/heap.py), on the event loop.",
            buckets=_QUEUE_BUCKETS,
            registry=r,
        )
        # With RECORDS_URL (app/record_keeping.py): failed uploads are retried, the local
        # copy kept meanwhile; a pending count that only grows is a store that is away.
        self.record_uploads = Counter(
            "offhook_record_uploads",
            "Record uploads to the S3 store (RECORDS_URL), by outcome (uploaded, failed).",
            ["outcome"],
            registry=r,
        )
        self.records_pending_upload = Gauge(
            "offhook_records_pending_upload",
            "Finished call records kept locally until the S3 store has them.",
            registry=r,
        )

        # With REDIS_URL (app/redis_ledger.py): a Redis that fails costs no call; each
        # decision it could not take is taken with this gateway's own checks instead.
        self.redis_up = Gauge(
            "offhook_redis_up",
            "1 while the shared Redis (REDIS_URL) answers, else 0 (also 0 without REDIS_URL).",
            registry=r,
        )
        self.redis_errors = Counter(
            "offhook_redis_errors",
            "Redis commands that failed or timed out, by operation.",
            ["op"],
            registry=r,
        )
        self.redis_fallbacks = Counter(
            "offhook_redis_fallbacks",
            "Admission decisions taken with this gateway's local checks only, Redis being "
            "unavailable, by operation.",
            ["op"],
            registry=r,
        )

    def model_waited(self, stage: str, seconds: float) -> None:
        """`ModelScheduler`'s on_wait hook (called in a model thread; thread-safe)."""
        self.model_queue_seconds.labels(stage=stage).observe(seconds)

    def model_ran(self, stage: str, seconds: float) -> None:
        """`ModelScheduler`'s on_run hook."""
        self.model_run_seconds.labels(stage=stage).observe(seconds)

    def _histogram(self, name: str, doc: str) -> Histogram:
        return Histogram(name, doc, buckets=_LATENCY_BUCKETS, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
