"""MiniCPM-o 4.5 on a GPU, through transformers (trust_remote_code), as a duplex backend.

The model runs its own per-unit loop (seeds: minicpmo-duplex-mode.md, "Worker-Side
Processing Details"); this adapter maps our backend calls onto the duplex methods of
the loaded model, each blocking, so each runs in a thread:

    prepare        → duplex_prepare(system_prompt, ref_audio, tts_audio)
    process_unit   → duplex_prefill(audio, frames)    # streaming_prefill: <unit> + audio
                     duplex_generate(force_listen)    # streaming_generate: listen or speak
    finalize_unit  → duplex_finalize()                # terminators + sliding window
    cleanup        → duplex_stop(); duplex_cleanup()  # KV and TTS caches; empty_cache

`duplex_generate`'s result carries `is_listen`, `text`, `audio_data` (float32 at 24 kHz,
the TTS rate) and `kv_cache_length`, as attributes or mapping keys; `end_of_turn` when
the model ended its turn (turn_eos). torch and transformers are imported in `load()`
only, so the CPU-only install imports this module freely.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agents.duplex.backend import UnitOutcome
from agents.duplex.protocol import Prepare
from agents.errors import BackendError, BackendUnavailable

log = logging.getLogger(__name__)

DEFAULT_MODEL = "openbmb/MiniCPM-o-4_5"
OUTPUT_RATE = 24000  # the model's TTS (Token2Wav) rate
_DUPLEX_METHODS = (
    "duplex_prepare",
    "duplex_prefill",
    "duplex_generate",
    "duplex_finalize",
    "duplex_cleanup",
)


def _field(result: Any, name: str, default: Any) -> Any:
    """Read a result field whether the model returns an object or a dict."""
    if isinstance(result, Mapping):
        return result.get(name, default)
    return getattr(result, name, default)


def _as_audio(data: Any) -> np.ndarray:
    """Model audio (numpy, a torch tensor, a list, or None) → float32 mono numpy."""
    if data is None:
        return np.zeros(0, dtype=np.float32)
    if hasattr(data, "detach"):  # a torch tensor, possibly on the GPU
        data = data.detach().float().cpu().numpy()
    return np.asarray(data, dtype=np.float32).reshape(-1)


class MiniCPMOBackend:
    name = "minicpmo"
    # The duplex API takes audio (and video frames) only: no way to tell it of a key press.
    keypad_input = False

    def __init__(
        self,
        *,
        model_id: str = DEFAULT_MODEL,
        model: Any = None,
        ref_audio: np.ndarray | None = None,
    ) -> None:
        """`model` is an already-loaded duplex model (tests pass a fake); else `load()`."""
        self.model_id = model_id
        self.ref_audio = ref_audio
        self._model: Any = model
        self._torch: Any = None
        self._force_listen = False

    @property
    def model(self) -> Any:
        if self._model is None:
            raise BackendUnavailable("MiniCPM-o is used before load()")
        return self._model

    async def load(self) -> None:
        if self._model is None:
            self._model = await asyncio.to_thread(self._load_blocking)
        missing = [m for m in _DUPLEX_METHODS if not callable(getattr(self._model, m, None))]
        if missing:
            raise BackendUnavailable(
                f"{self.model_id} has no duplex API here: missing {', '.join(missing)}"
            )

    def _load_blocking(self) -> Any:
        try:
            import torch
            import transformers
        except ImportError as exc:
            raise BackendUnavailable(
                f"MiniCPM-o needs torch and transformers, which are not installed ({exc}); "
                "install them on the GPU host or use --backend cascade"
            ) from exc
        if not torch.cuda.is_available():
            raise BackendUnavailable("MiniCPM-o needs a CUDA GPU; torch sees none")
        self._torch = torch
        try:
            model = transformers.AutoModel.from_pretrained(
                self.model_id,
                trust_remote_code=True,
                torch_dtype=torch.bfloat16,
                attn_implementation="sdpa",
            )
        except Exception as exc:  # hub, file and remote-code errors all mean the same here
            raise BackendUnavailable(f"could not load {self.model_id}: {exc}") from exc
        model = model.eval().cuda()
        # Some releases expose the duplex methods on a view rather than the model itself.
        if not hasattr(model, "duplex_prepare") and hasattr(model, "as_duplex"):
            model = model.as_duplex()
        gc.collect()
        torch.cuda.empty_cache()
        return model

    async def prepare(self, request: Prepare) -> None:
        # The model takes the persona as its system prompt; earlier turns go in as text.
        history = "\n".join(f"{m['role']}: {m['content']}" for m in request.history)
        prompt = f"{request.system_prompt}\n{history}".strip()
        self._force_listen = bool(request.config.get("force_listen", False))
        await asyncio.to_thread(
            self.model.duplex_prepare,
            system_prompt=prompt,
            ref_audio=self.ref_audio,
            tts_audio=self.ref_audio,
        )

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        # MiniCPM-o hears the audio itself: the gateway's speech windows are not needed.
        audio = np.asarray(audio_16k, dtype=np.float32)
        try:
            started = time.perf_counter()
            await asyncio.to_thread(self.model.duplex_prefill, audio=audio, frames=None)
            prefilled = time.perf_counter()
            result = await asyncio.to_thread(
                self.model.duplex_generate, force_listen=self._force_listen
            )
            generated = time.perf_counter()
        except BackendUnavailable:
            raise
        except Exception as exc:  # torch/CUDA errors: map to our own at the boundary
            raise BackendError(f"MiniCPM-o failed on a unit: {exc}") from exc
        timings = {
            "prefill": (prefilled - started) * 1000,
            "generate": (generated - prefilled) * 1000,
        }
        context_len = int(_field(result, "kv_cache_length", 0) or 0)
        if _field(result, "is_listen", True):
            return UnitOutcome(context_len=context_len, timings=timings)
        return UnitOutcome(
            action="speak",
            text=str(_field(result, "text", "") or ""),
            audio=_as_audio(_field(result, "audio_data", None)),
            sample_rate=int(_field(result, "sample_rate", OUTPUT_RATE) or OUTPUT_RATE),
            end_of_turn=bool(_field(result, "end_of_turn", False)),
            context_len=context_len,
            timings=timings,
        )

    async def keypad(self, digits: str) -> None:
        raise BackendUnavailable("MiniCPM-o's duplex API has no input for keypad presses")

    async def finalize_unit(self) -> None:
        try:
            await asyncio.to_thread(self.model.duplex_finalize)
        except Exception as exc:
            raise BackendError(f"MiniCPM-o finalize failed: {exc}") from exc

    async def cleanup(self) -> None:
        if self._model is None:
            return
        stop = getattr(self._model, "duplex_stop", None)
        if callable(stop):
            await asyncio.to_thread(stop)
        await asyncio.to_thread(self._model.duplex_cleanup)
        # ~1.5 GB of session caches stay allocated unless handed back explicitly.
        gc.collect()
        if self._torch is not None:
            self._torch.cuda.empty_cache()

    def memory_mb(self) -> float:
        if self._torch is None:
            return 0.0
        return float(self._torch.cuda.memory_allocated()) / 2**20
