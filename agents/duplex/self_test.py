"""`offhook worker --backend minicpmo --self-test QUESTION.wav`: one call, no gateway.

For an operator on a new GPU box: loads the model, prepares a session with the voice,
feeds the question in 1 s units followed by silence for the answer, writes what the
model said as a WAV, and prints each unit's timings, the KV cache length, and GPU
memory before and after the session's cleanup (which should fall back to the loaded
model's own). Exit status 0 when the model spoke, 1 when it did not.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

import numpy as np

from agents.duplex.minicpmo import OUTPUT_RATE, UNIT_SAMPLES, MiniCPMOBackend
from agents.duplex.omni_voice import VOICE_RATE
from agents.duplex.protocol import Prepare
from agents.errors import BackendUnavailable
from media.resample import resample
from media.wav import WavError, read_wav, write_wav

ANSWER_SILENCE_S = 10  # after the question: time for the model to answer in
PERSONA = "You are a friendly phone assistant. Answer briefly in plain spoken English."


def _question(path: Path) -> np.ndarray:
    try:
        audio, rate = read_wav(path)
    except WavError as exc:  # before the 20 GB model loads: one line, not a traceback
        raise BackendUnavailable(f"the question WAV {exc}") from exc
    if audio.size == 0:
        raise BackendUnavailable(f"the question WAV {path} holds no audio")
    if rate != VOICE_RATE:
        audio = resample(audio, rate, VOICE_RATE)
    # Whole units only: the model takes no part of one.
    tail = ANSWER_SILENCE_S * VOICE_RATE + (-audio.size) % UNIT_SAMPLES
    return np.concatenate([audio.astype(np.float32), np.zeros(tail, dtype=np.float32)])


async def self_test(
    backend: MiniCPMOBackend, question: Path, reply: Path, out: TextIO, *, persona: str = PERSONA
) -> int:
    def say(line: str) -> None:
        print(line, file=out, flush=True)

    def memory() -> str:
        return f"allocated {backend.memory_mb():,.0f} MB, reserved {backend.reserved_mb():,.0f} MB"

    audio = _question(question)
    say(f"loading {backend.model_id} ...")
    started = time.perf_counter()
    await backend.load()
    say(f"loaded in {time.perf_counter() - started:.1f} s; GPU {memory()}")
    started = time.perf_counter()
    await backend.prepare(Prepare(system_prompt=persona))
    say(f"prepared (voice, prompt) in {(time.perf_counter() - started) * 1000:.0f} ms")
    spoken: list[np.ndarray] = []
    texts: list[str] = []
    try:
        for index, start in enumerate(range(0, audio.size, UNIT_SAMPLES)):
            began = time.perf_counter()
            outcome = await backend.process_unit(audio[start : start + UNIT_SAMPLES])
            wall = (time.perf_counter() - began) * 1000
            t = outcome.timings
            say(
                f"unit {index:3d} {outcome.action:6s} prefill {t.get('prefill', 0):5.0f} ms  "
                f"generate {t.get('generate', 0):5.0f} ms  wall {wall:5.0f} ms  "
                f"kv {outcome.context_len:6d}  {outcome.text}"
                + ("  <turn end>" if outcome.end_of_turn else "")
            )
            if outcome.audio.size:
                rate = outcome.sample_rate
                spoken.append(
                    outcome.audio
                    if rate == OUTPUT_RATE
                    else resample(outcome.audio, rate, OUTPUT_RATE)
                )
            texts.append(outcome.text)
            await backend.finalize_unit()
        say(f"GPU before cleanup: {memory()}")
    finally:
        await backend.cleanup()
    say(f"GPU after cleanup:  {memory()}")
    reply_audio = np.concatenate(spoken) if spoken else np.zeros(0, dtype=np.float32)
    write_wav(reply, reply_audio, OUTPUT_RATE)
    words = " ".join(t for t in texts if t)
    say(f"reply: {reply_audio.size / OUTPUT_RATE:.1f} s at {OUTPUT_RATE} Hz -> {reply}: {words!r}")
    if not reply_audio.size:
        say("the model did not speak: check the voice WAV and the question's loudness")
        return 1
    return 0
