"""`bench judge --stt-url`: the judges are asked about what a transcription server heard,
as STT_URL makes a call hear, and the embedded Whisper is not loaded."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np

from agents.assets import ModelCache
from agents.cascade.hosted_stt import HostedTranscriber
from app.settings import Settings
from benchmarks.judge import Listeners


def test_a_transcription_server_hears_the_lines_the_judges_are_asked_about() -> None:
    sent: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        segment = {"text": " I would like a table for", "tokens": [1, 2, 3, 4, 5, 6]}
        segment |= {"avg_logprob": -0.3, "no_speech_prob": 0.02}
        return httpx.Response(
            200, json={"text": " I would like a table for", "segments": [segment]}
        )

    cache = ModelCache(Settings.from_env({}).model_cache_dir)
    hosted = HostedTranscriber("http://stt.invalid/v1", transport=httpx.MockTransport(server))
    listeners = Listeners.load(
        Path("/nonexistent/whisper"),  # not loaded: the server hears
        cache.path("smart-turn-v3.2"),
        cache.path("smollm2-135m-instruct"),
        hosted=hosted,
    )
    try:
        line = (0.2 * np.sin(np.arange(16000) * 0.3) * 32767).astype(np.int16)  # 2 s at 8 kHz
        seen = listeners.observe(
            "How can I help you?", line, line.size, [], item=0, final=False, pause_ms=800.0
        )
    finally:
        listeners.words_judge.close()
    assert len(sent) == 1
    assert seen.text == "I would like a table for"
    assert seen.hearing == "heard" and seen.avg_logprob == -0.3
    assert seen.words is not None and 0.0 <= seen.words < 0.5  # it read the server's words
