"""MiniCPMOBackend's adapter logic against a fake model.

The fake mimics the worker-side duplex API in the seed minicpmo-duplex-mode.md,
"Worker-Side Processing Details" (and the unit loop in "Per-Second Unit Loop"):

    duplex_prepare(system_prompt, ref_audio, tts_audio)
    duplex_prefill(audio, frames)      audio: float32 16 kHz; frames: None in audio mode
    duplex_generate(force_listen) ->   {is_listen, text, audio_data (24 kHz), kv_cache_length}
    duplex_finalize(), duplex_stop(), duplex_cleanup()

`duplex_generate` returns a dict here; the adapter also reads attributes.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from agents.duplex.minicpmo import OUTPUT_RATE, MiniCPMOBackend
from agents.duplex.protocol import Prepare
from agents.errors import BackendError, BackendUnavailable


class FakeDuplexModel:
    def __init__(self, script: list[Any]) -> None:
        self.script = list(script)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.kv = 100

    def duplex_prepare(self, system_prompt: str, ref_audio: Any, tts_audio: Any) -> None:
        self.calls.append(("prepare", {"system_prompt": system_prompt}))

    def duplex_prefill(self, audio: np.ndarray, frames: Any = None) -> None:
        self.calls.append(("prefill", {"samples": audio.size, "frames": frames}))
        self.kv += 26  # ~ one unit token + audio embeddings

    def duplex_generate(self, force_listen: bool = False) -> Any:
        self.calls.append(("generate", {"force_listen": force_listen}))
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step | {"kv_cache_length": self.kv} if isinstance(step, dict) else step

    def duplex_finalize(self) -> None:
        self.calls.append(("finalize", {}))

    def duplex_stop(self) -> None:
        self.calls.append(("stop", {}))

    def duplex_cleanup(self) -> None:
        self.calls.append(("cleanup", {}))


async def test_listen_then_speak_then_finalize_and_cleanup() -> None:
    voice = np.full(OUTPUT_RATE // 2, 0.2, dtype=np.float32)
    model = FakeDuplexModel(
        [
            {"is_listen": True, "text": "", "audio_data": None},
            {"is_listen": False, "text": "Hello there.", "audio_data": voice},
            SimpleNamespace(is_listen=False, text="Bye.", audio_data=[0.1] * 10, end_of_turn=True),
        ]
    )
    backend = MiniCPMOBackend(model=model)
    await backend.load()
    history = [{"role": "user", "content": "hi"}]
    await backend.prepare(Prepare(system_prompt="be brief", history=history))
    assert model.calls[0] == ("prepare", {"system_prompt": "be brief\nuser: hi"})

    unit = np.zeros(16000, dtype=np.float32)
    listen = await backend.process_unit(unit)
    assert listen.action == "listen" and listen.context_len == 126
    assert set(listen.timings) == {"prefill", "generate"}
    await backend.finalize_unit()

    speak = await backend.process_unit(unit)
    assert speak.action == "speak" and speak.text == "Hello there."
    assert speak.sample_rate == OUTPUT_RATE and speak.audio.size == voice.size
    assert not speak.end_of_turn and speak.context_len == 152

    last = await backend.process_unit(unit)
    assert last.end_of_turn and last.audio.dtype == np.float32 and last.audio.size == 10
    await backend.cleanup()

    names = [name for name, _ in model.calls]
    assert names == [
        "prepare",
        *["prefill", "generate", "finalize"],
        *["prefill", "generate"] * 2,
        "stop",
        "cleanup",
    ]
    assert model.calls[1] == ("prefill", {"samples": 16000, "frames": None})
    assert backend.memory_mb() == 0.0  # no torch: nothing on a GPU


async def test_force_listen_comes_from_the_prepare_config() -> None:
    model = FakeDuplexModel([{"is_listen": True}])
    backend = MiniCPMOBackend(model=model)
    await backend.load()
    await backend.prepare(Prepare(system_prompt="", config={"force_listen": True}))
    await backend.process_unit(np.zeros(160, dtype=np.float32))
    assert ("generate", {"force_listen": True}) in model.calls


async def test_model_errors_map_to_backend_error() -> None:
    model = FakeDuplexModel([RuntimeError("CUDA out of memory")])
    backend = MiniCPMOBackend(model=model)
    await backend.load()
    await backend.prepare(Prepare(system_prompt=""))
    with pytest.raises(BackendError, match="CUDA out of memory"):
        await backend.process_unit(np.zeros(160, dtype=np.float32))


async def test_a_model_without_the_duplex_api_is_unavailable() -> None:
    backend = MiniCPMOBackend(model=object())
    with pytest.raises(BackendUnavailable, match="duplex_prepare"):
        await backend.load()


async def test_missing_torch_is_a_clear_backend_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch → ImportError
    backend = MiniCPMOBackend(model_id="nowhere/model")
    with pytest.raises(BackendUnavailable, match="torch and transformers"):
        await backend.load()


def test_importing_the_module_does_not_import_torch() -> None:
    import agents.duplex.minicpmo  # noqa: F401 - the import is what is tested

    assert "torch" not in sys.modules or sys.modules["torch"] is None
