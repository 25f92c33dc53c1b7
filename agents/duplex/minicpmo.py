"""MiniCPM-o 4.5 on a GPU as a duplex backend, through the model's own duplex API.

`AutoModel.from_pretrained("openbmb/MiniCPM-o-4_5", trust_remote_code=True)` gives a
model whose `as_duplex(**config)` returns a `MiniCPMODuplex` session object (sources:
OpenBMB/MiniCPM-o README, "Duplex Omni Mode"; OpenBMB/minicpm-o-4_5-pytorch-simple-demo
MiniCPMO45/modeling_minicpmo.py, class MiniCPMODuplex; summarised in
shared/reference/minicpmo-api.md). Our backend calls map onto it, each blocking call in
a thread:

    prepare       → prepare(prefix_system_prompt, suffix_system_prompt, ref_audio,
                            prompt_wav_path)
    process_unit  → per model unit (1 s of 16 kHz; the first 1,035 ms):
                      streaming_prefill(audio_waveform=..., text_list=[keys] or None)
                      streaming_generate(prompt_wav_path=...) →
                        {is_listen, text, audio_waveform (24 kHz), end_of_turn, cost_*}
    finalize_unit → nothing: streaming_generate feeds the unit's terminators and slides
                    the window itself
    cleanup       → set_session_stop(), then the demo's recipe that hands the session's
                    ~1.5 GB back (core/processors/unified.py, DuplexView.cleanup)

Units: the gateway's units (UNIT_MS) are re-cut into the model's. The model silently
misreads a short unit (it feeds `<unit>` before finding the audio short and returning
success=False), so only whole units are fed; the rest waits for the next gateway unit.
The first is the model's 1,035 ms: we lead it with 35 ms of silence, as the model's own
code pads a short first chunk, rather than holding a second of the caller back.

Prompt wrapping (decided here; the model's `prepare` tokenizes what it is given as is):
the demo's chat layout, `<|im_start|>system\\n{persona and history}\\n<|audio_start|>`,
the voice as `ref_audio`, then `<|audio_end|><|im_end|>`.

torch and transformers are imported in the loader only, so the CPU install imports this
module freely.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.util
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.duplex.backend import UnitOutcome
from agents.duplex.omni_voice import default_voice_wav, load_voice
from agents.duplex.protocol import Prepare
from agents.errors import BackendError, BackendUnavailable

log = logging.getLogger(__name__)

DEFAULT_MODEL = "openbmb/MiniCPM-o-4_5"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "offhook"  # OFFHOOK_CACHE_DIR's default
INPUT_RATE = 16000
OUTPUT_RATE = 24000  # Token2wav, the model's streaming vocoder
UNIT_SAMPLES = INPUT_RATE  # chunk_ms=1000
FIRST_UNIT_SAMPLES = INPUT_RATE * 1035 // 1000  # first_chunk_ms=1035: 16,560
TRANSFORMERS_SERIES = "4.51."  # the model code relies on this series' DynamicCache
INSTALL_HINT = "pip install 'offhook[omni]' (transformers==4.51.*, torch<=2.8, minicpmo-utils[all])"
PROMPT_PREFIX = "<|im_start|>system\n{text}\n<|audio_start|>"
PROMPT_SUFFIX = "<|audio_end|><|im_end|>"


def duplex_config() -> dict[str, Any]:
    """`as_duplex` keyword arguments for a phone line."""
    return {
        "generate_audio": True,
        "ls_mode": "explicit",
        # The first units after prepare are the greeting playing out: listen through them.
        "force_listen_count": 3,
        # Off, the KV cache grows toward the 40,960-token context over a long call.
        "sliding_window_mode": "basic",
        "chunk_ms": 1000,
        "first_chunk_ms": 1035,
        "sample_rate": INPUT_RATE,
    }


@dataclass(slots=True)
class LoadedModel:
    """What a loader hands the backend."""

    duplex: Any  # MiniCPMODuplex
    cuda: Any  # torch.cuda: memory_allocated(), memory_reserved(), empty_cache()


Loader = Callable[[], LoadedModel]


def load_minicpmo(model_id: str = DEFAULT_MODEL) -> LoadedModel:
    """Blocking: load the model onto the GPU and open its duplex view.

    Every way this fails here is a `BackendUnavailable` that says what to install or fix.
    """
    try:
        torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise BackendUnavailable(
            f"MiniCPM-o needs torch and transformers, which are not installed ({exc}): "
            f"{INSTALL_HINT}; or use --backend cascade"
        ) from exc
    version = str(getattr(transformers, "__version__", "?"))
    if not version.startswith(TRANSFORMERS_SERIES):
        raise BackendUnavailable(
            f"MiniCPM-o 4.5's model code needs transformers {TRANSFORMERS_SERIES}*, found "
            f"{version}: {INSTALL_HINT}"
        )
    if importlib.util.find_spec("stepaudio2") is None:
        raise BackendUnavailable(
            f"MiniCPM-o's streaming vocoder (stepaudio2.Token2wav) is not installed: {INSTALL_HINT}"
        )
    if not torch.cuda.is_available():
        raise BackendUnavailable(
            "MiniCPM-o needs a CUDA GPU (about 23 GB free) and torch sees none; "
            "check the driver and that torch is a CUDA build, or use --backend cascade"
        )
    try:
        model = transformers.AutoModel.from_pretrained(
            model_id,
            trust_remote_code=True,
            torch_dtype=torch.bfloat16,
            attn_implementation="sdpa",
            init_vision=False,  # a phone line has no pictures: ~1 GB less
            init_audio=True,
            init_tts=True,
        )
    except (OSError, ValueError) as exc:  # not in the cache / not on the Hub / bad folder
        raise BackendUnavailable(
            f"MiniCPM-o weights {model_id!r} could not be loaded ({exc}); pre-seed the "
            "Hugging Face cache (docs/duplex-workers.md) or pass --model FOLDER"
        ) from exc
    except ImportError as exc:  # the remote code's own imports
        raise BackendUnavailable(
            f"MiniCPM-o's model code cannot import: {exc}; {INSTALL_HINT}"
        ) from exc
    model = model.eval().cuda()
    as_duplex = getattr(model, "as_duplex", None)
    if not callable(as_duplex):
        raise BackendUnavailable(
            f"{model_id} has no as_duplex(): it is not MiniCPM-o 4.5's model code"
        )
    try:
        duplex = as_duplex(**duplex_config())
    except ImportError as exc:  # init_tts: stepaudio2 missing after all
        raise BackendUnavailable(f"MiniCPM-o's vocoder cannot load: {exc}; {INSTALL_HINT}") from exc
    except FileNotFoundError as exc:  # init_tts: the snapshot's assets/token2wav/
        raise BackendUnavailable(
            f"MiniCPM-o's vocoder files are missing ({exc}): the snapshot needs "
            "assets/token2wav/; download the whole model repository"
        ) from exc
    gc.collect()
    torch.cuda.empty_cache()  # loading leaves residue the first session would sit on
    return LoadedModel(duplex=duplex, cuda=torch.cuda)


def system_prompt(request: Prepare) -> str:
    """The persona, then the conversation so far as plain lines."""
    history = "\n".join(f"{m['role']}: {m['content']}" for m in request.history)
    return f"{request.system_prompt}\n{history}".strip()


@dataclass(slots=True)
class _Turn:
    """Model units' results merged into one gateway unit's outcome."""

    listen: bool = True
    texts: list[str] = field(default_factory=list)
    audio: list[np.ndarray] = field(default_factory=list)
    end_of_turn: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    def add_timing(self, name: str, seconds: Any) -> None:
        self.timings[name] = self.timings.get(name, 0.0) + float(seconds or 0.0) * 1000


class MiniCPMOBackend:
    name = "minicpmo"
    keypad_input = True  # key presses reach the model as text in its next unit

    def __init__(
        self,
        *,
        voice_wav: Callable[[], Path] | None = None,
        model_id: str = DEFAULT_MODEL,
        loader: Loader | None = None,
    ) -> None:
        """`voice_wav` finds (or makes) the voice file at load, by default the bundled
        voice in the default model cache; `loader` is for tests."""
        self.model_id = model_id
        self._voice_wav = voice_wav or (lambda: default_voice_wav(DEFAULT_CACHE_DIR))
        self._loader: Loader = loader or (lambda: load_minicpmo(model_id))
        self._loaded: LoadedModel | None = None
        self._voice_path = ""
        self._voice = np.zeros(0, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)  # caller audio not yet fed
        self._units_fed = 0
        self._keys: list[str] = []  # key presses for the next model unit
        # One model call at a time: cleanup waits for an in-flight unit it has stopped.
        self._model_lock = threading.Lock()

    @property
    def duplex(self) -> Any:
        if self._loaded is None:
            raise BackendUnavailable("MiniCPM-o is used before load()")
        return self._loaded.duplex

    async def load(self) -> None:
        if self._loaded is not None:
            return
        self._loaded, self._voice_path, self._voice = await asyncio.to_thread(self._load)

    def _load(self) -> tuple[LoadedModel, str, np.ndarray]:
        # The voice first: a bad OMNI_VOICE_WAV should not cost a 20 GB load to find out.
        path = self._voice_wav()
        voice = load_voice(path)
        return self._loader(), str(path), voice

    async def prepare(self, request: Prepare) -> None:
        self._pending = np.zeros(0, dtype=np.float32)
        self._units_fed = 0
        self._keys = []
        await asyncio.to_thread(self._prepare, system_prompt(request))

    def _prepare(self, text: str) -> None:
        with self._model_lock:
            self.duplex.prepare(
                prefix_system_prompt=PROMPT_PREFIX.format(text=text),
                suffix_system_prompt=PROMPT_SUFFIX,
                ref_audio=self._voice,
                prompt_wav_path=self._voice_path,
            )

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        # MiniCPM-o hears the audio itself: the gateway's speech windows are not needed.
        audio = np.asarray(audio_16k, dtype=np.float32).reshape(-1)
        if self._units_fed == 0 and self._pending.size == 0:
            audio = np.concatenate([np.zeros(FIRST_UNIT_SAMPLES - UNIT_SAMPLES, np.float32), audio])
        self._pending = np.concatenate([self._pending, audio])
        started = time.perf_counter()
        try:
            turn = await asyncio.to_thread(self._run_units)
        except BackendError:
            raise
        except Exception as exc:  # torch/CUDA errors: map to our own at the boundary
            raise BackendError(f"MiniCPM-o failed on a unit: {exc}") from exc
        turn.timings["model"] = (time.perf_counter() - started) * 1000
        context_len = await asyncio.to_thread(self._cache_length)
        if turn.listen:
            return UnitOutcome(context_len=context_len, timings=turn.timings)
        speech_audio = np.concatenate(turn.audio) if turn.audio else np.zeros(0, np.float32)
        return UnitOutcome(
            action="speak",
            text=" ".join(t for t in turn.texts if t).strip(),
            audio=speech_audio,
            sample_rate=OUTPUT_RATE,
            end_of_turn=turn.end_of_turn,
            context_len=context_len,
            timings=turn.timings,
        )

    def _cache_length(self) -> int:
        with self._model_lock:
            return int(self.duplex.decoder.get_cache_length())

    def _run_units(self) -> _Turn:
        """Feed every whole model unit that is waiting; merge what the model said."""
        turn = _Turn()
        with self._model_lock:
            while self._pending.size >= (need := self._unit_samples()):
                chunk, self._pending = self._pending[:need], self._pending[need:]
                keys, self._keys = self._keys, []
                self._one_unit(chunk, keys, turn)
        return turn

    def _unit_samples(self) -> int:
        return FIRST_UNIT_SAMPLES if self._units_fed == 0 else UNIT_SAMPLES

    def _one_unit(self, chunk: np.ndarray, keys: list[str], turn: _Turn) -> None:
        duplex = self.duplex
        prefill: Mapping[str, Any] = duplex.streaming_prefill(
            audio_waveform=chunk, text_list=keys or None
        )
        self._units_fed += 1
        if not prefill["success"]:
            if duplex.is_session_stop_set():
                raise BackendError("MiniCPM-o session was stopped")
            raise BackendError(f"MiniCPM-o refused a unit: {prefill['reason']}")
        turn.add_timing("prefill", prefill["cost_all"])
        result: Mapping[str, Any] = duplex.streaming_generate(prompt_wav_path=self._voice_path)
        turn.add_timing("generate", result["cost_all"])
        turn.add_timing("tts", result["cost_tts"])
        if result["is_listen"]:
            return  # its audio_waveform is a second of silence: nothing to play
        turn.listen = False
        turn.texts.append(str(result["text"]))
        waveform = result["audio_waveform"]
        if waveform is not None:
            turn.audio.append(_as_audio(waveform))
        turn.end_of_turn = turn.end_of_turn or bool(result["end_of_turn"])

    async def keypad(self, digits: str) -> None:
        # Told, not acted on: the model hears it with the next unit's audio.
        self._keys.append(f"(the caller pressed {' '.join(digits)} on the keypad)")

    async def finalize_unit(self) -> None:
        """Nothing: streaming_generate ends the unit and slides the window itself."""

    async def cleanup(self) -> None:
        if self._loaded is None:
            return
        # Thread-safe: an in-flight prefill/generate returns early, then we take the lock.
        self._loaded.duplex.set_session_stop()
        await asyncio.to_thread(self._release_session)

    def _release_session(self) -> None:
        """The demo's recipe (DuplexView.cleanup): the session's KV and vocoder caches."""
        assert self._loaded is not None
        duplex = self._loaded.duplex
        with self._model_lock:
            duplex._reset_streaming_state()
            duplex.decoder.reset()
            vocoder = duplex.model.tts.audio_tokenizer
            for name in ("stream_cache", "hift_cache_dict", "cache"):
                if getattr(vocoder, name, None) is not None:
                    setattr(vocoder, name, None)
            duplex.model.reset_session(reset_token2wav_cache=True)
            self._pending = np.zeros(0, dtype=np.float32)
            self._keys = []
        gc.collect()  # the caches are only garbage until collected ...
        self._loaded.cuda.empty_cache()  # ... and only reserved by torch until handed back

    def memory_mb(self) -> float:
        if self._loaded is None:
            return 0.0
        return float(self._loaded.cuda.memory_allocated()) / 2**20

    def reserved_mb(self) -> float:
        """GPU memory torch holds, in use or cached: what cleanup hands back."""
        if self._loaded is None:
            return 0.0
        return float(self._loaded.cuda.memory_reserved()) / 2**20


def _as_audio(data: Any) -> np.ndarray:
    """Model audio (numpy or a torch tensor, possibly on the GPU) → float32 mono numpy."""
    if hasattr(data, "detach"):
        data = data.detach().float().cpu().numpy()
    return np.asarray(data, dtype=np.float32).reshape(-1)
