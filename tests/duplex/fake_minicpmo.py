"""A CPU stand-in for MiniCPM-o 4.5's duplex API, shaped exactly like the real one.

Mirrors `MiniCPMODuplex` in OpenBMB/minicpm-o-4_5-pytorch-simple-demo,
MiniCPMO45/modeling_minicpmo.py (commit c7e1660, 2026-03-18; the same class the Hub's
remote code returns from `model.as_duplex()`), and the demo's cleanup recipe in
core/processors/unified.py (DuplexView.cleanup). What it keeps from the real code:

- the keyword names of `as_duplex`, `prepare`, `streaming_prefill`, `streaming_generate`
  and `reset_session` (a wrong name is a TypeError here; the real `as_duplex` reads its
  config with kwargs.get and would silently ignore a misspelt key, so this one refuses);
- the result dicts' keys (`success`, `reason`, `cost_*`; `is_listen`, `text`,
  `audio_waveform`, `end_of_turn`, `current_time`, `cost_*`, `n_tokens`, `n_tts_tokens`);
- unit lengths: the first unit is padded at the front to 1,035 ms (16,560 samples); any
  later unit under 1 s gives success=False, "audio not enough", after `<unit>` was
  already fed (so a short unit corrupts the context: `dangling_units` counts them);
- a listen returns one second of zeros at 24 kHz; a spoken unit float32 audio at 24 kHz,
  left-padded to a second unless it ends the turn (`_generate_waveform_from_tokens`);
  with no voice (`prompt_wav_path`) at prepare, text and `audio_waveform=None`;
- while the model's turn is open a sampled listen is rewritten to keep speaking; only
  the first `force_listen_count` units or a break/stop make it listen;
- stop/break: `set_session_stop()` sets both events; prefill then returns success=False
  and generate a listen with end_of_turn=True; `prepare` clears both;
- `decoder.get_cache_length()` and the "basic" sliding window (high 4,000 → low 3,500
  tokens, the system prompt kept);
- GPU memory: a session's KV cache, vocoder caches and token2wav cache stay allocated
  until the cleanup recipe drops them, and stay reserved until `empty_cache()`.

What it decides is scripted: `wants` lists, per unit, "listen" or "speak" as the
sampler's first token; a spoken turn says the next of `replies`, three words a unit,
then ends with <|turn_eos|>.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MB = 2**20
SESSION_KV_BYTES = 660 * MB  # the demo's figures for one session's caches
VOCODER_CACHE_BYTES = 820 * MB
TOKEN2WAV_CACHE_BYTES = 66 * MB
WEIGHTS_BYTES = 21_500 * MB
AUDIO_TOKENS_PER_UNIT = 25  # audio embeddings per second of caller audio
WORDS_PER_UNIT = 3

_AS_DUPLEX_KEYS = frozenset(
    {
        "generate_audio",
        "ls_mode",
        "max_new_speak_tokens_per_chunk",
        "text_repetition_penalty",
        "temperature",
        "top_k",
        "top_p",
        "text_repetition_window_size",
        "listen_prob_scale",
        "force_listen_count",
        "tts_temperature",
        "tts_repetition_penalty",
        "chunk_ms",
        "first_chunk_ms",
        "cnn_redundancy_ms",
        "sample_rate",
        "sliding_window_mode",
        "basic_window_high_tokens",
        "basic_window_low_tokens",
        "context_previous_max_tokens",
        "context_max_units",
        "n_timesteps",
    }
)


class FakeCuda:
    """torch.cuda's memory counters, over the fake model's live buffers.

    Each buffer is a probe that says how many bytes it holds now, so memory is freed
    exactly when the model drops the buffer, as torch frees a tensor nobody refers to;
    freed memory stays reserved (torch's caching allocator) until `empty_cache()`.
    """

    def __init__(self) -> None:
        self.live: dict[str, Callable[[], int]] = {"weights": lambda: WEIGHTS_BYTES}
        self._reserved = WEIGHTS_BYTES
        self.empty_cache_calls = 0

    def track(self, name: str, probe: Callable[[], int]) -> None:
        self.live[name] = probe

    def touch(self) -> None:
        """Something was allocated: reserved memory grows with it."""
        self._reserved = max(self._reserved, self.memory_allocated())

    def memory_allocated(self) -> int:
        return sum(probe() for probe in self.live.values())

    def memory_reserved(self) -> int:
        return self._reserved

    def empty_cache(self) -> None:
        self.empty_cache_calls += 1
        self._reserved = self.memory_allocated()

    def is_available(self) -> bool:
        return True


class _Decoder:
    """StreamDecoder: the KV cache, as a token count."""

    def __init__(self, cuda: FakeCuda, mode: str, high: int, low: int) -> None:
        cuda.track("kv", lambda: SESSION_KV_BYTES if self.length else 0)
        self.cuda = cuda
        self.mode, self.high, self.low = mode, high, low
        self.length = 0
        self.protected = 0  # the system prompt: never slid out

    def feed(self, tokens: int) -> None:
        self.length += tokens
        self.cuda.touch()

    def register_system_prompt(self) -> None:
        self.protected = self.length

    def enforce_window(self) -> None:
        if self.mode == "basic" and self.length > self.high:
            self.length = max(self.protected, self.low)

    def get_cache_length(self) -> int:
        return self.length

    def reset(self) -> None:
        self.length = 0
        self.protected = 0


@dataclass
class _AudioTokenizer:
    """Token2wav's live caches (the largest leak when a session is not cleaned up)."""

    cuda: FakeCuda
    stream_cache: Any = None
    hift_cache_dict: Any = None
    cache: Any = None

    def __post_init__(self) -> None:
        self.cuda.track("vocoder", lambda: 0 if self.released() else VOCODER_CACHE_BYTES)

    def set_stream_cache(self, prompt_wav_path: str) -> tuple[object, object]:
        self.stream_cache, self.hift_cache_dict, self.cache = object(), object(), object()
        self.cuda.touch()
        return self.stream_cache, self.hift_cache_dict

    def released(self) -> bool:
        return self.stream_cache is None and self.hift_cache_dict is None and self.cache is None


@dataclass
class _Tts:
    audio_tokenizer: _AudioTokenizer


@dataclass
class FakeMiniCPMO:
    """What AutoModel.from_pretrained returns: the model, with `as_duplex`."""

    gpu: FakeCuda = field(default_factory=FakeCuda)
    wants: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    on_generate: Callable[[], None] | None = None  # runs inside streaming_generate
    tts: _Tts = field(init=False)
    duplex_config: dict[str, Any] = field(default_factory=dict)
    on_cuda: bool = False
    token2wav_cache: object | None = None

    def __post_init__(self) -> None:
        self.tts = _Tts(_AudioTokenizer(self.gpu))
        self.gpu.track(
            "token2wav", lambda: 0 if self.token2wav_cache is None else TOKEN2WAV_CACHE_BYTES
        )

    def eval(self) -> FakeMiniCPMO:
        return self

    def cuda(self) -> FakeMiniCPMO:
        self.on_cuda = True
        return self

    def as_duplex(self, device: str | None = None, **kwargs: Any) -> FakeDuplex:
        unknown = set(kwargs) - _AS_DUPLEX_KEYS
        if unknown:
            raise TypeError(f"as_duplex: unknown config {sorted(unknown)}")
        self.duplex_config = dict(kwargs)
        return FakeDuplex(self, **kwargs)

    def reset_session(self, reset_token2wav_cache: bool = True) -> None:
        if reset_token2wav_cache:
            self.token2wav_cache = None


class FakeDuplex:
    """MiniCPMODuplex."""

    def __init__(
        self,
        model: FakeMiniCPMO,
        generate_audio: bool = True,
        ls_mode: str = "explicit",
        force_listen_count: int = 0,
        chunk_ms: int = 1000,
        first_chunk_ms: int = 1035,
        sample_rate: int = 16000,
        sliding_window_mode: str = "off",
        basic_window_high_tokens: int = 4000,
        basic_window_low_tokens: int = 3500,
        **_rest: Any,
    ) -> None:
        self.model = model
        self.generate_audio = generate_audio
        self.force_listen_count = force_listen_count
        self.CHUNK_MS, self.FIRST_CHUNK_MS, self.SAMPLE_RATE = chunk_ms, first_chunk_ms, sample_rate
        self.decoder = _Decoder(
            model.gpu, sliding_window_mode, basic_window_high_tokens, basic_window_low_tokens
        )
        self.break_event = threading.Event()
        self.session_stop_event = threading.Event()
        self.prepared_with: dict[str, Any] = {}
        self.fed: list[dict[str, Any]] = []  # what each successful prefill took
        self.dangling_units = 0  # <unit> fed by a prefill that then failed
        self._reset_streaming_state()

    # -- control (thread-safe events) --------------------------------------------------
    def set_break_event(self) -> None:
        self.break_event.set()

    def clear_break_event(self) -> None:
        self.break_event.clear()

    def set_session_stop(self) -> None:
        self.session_stop_event.set()
        self.break_event.set()

    def clear_session_stop(self) -> None:
        self.session_stop_event.clear()

    def is_break_set(self) -> bool:
        return self.break_event.is_set()

    def is_session_stop_set(self) -> bool:
        return self.session_stop_event.is_set()

    def get_current_time(self) -> int:
        return self.audio_chunk_idx

    def get_generated_text(self) -> str:
        return " ".join(self.spoken)

    # -- session ------------------------------------------------------------------------
    def _reset_streaming_state(self) -> None:
        self.audio_chunk_idx = 0
        self.current_turn_ended = True
        self.audio_buffer = np.array([], dtype=np.float32)
        self.pending = False
        self._generate_count = 0
        self.voice = False
        self.spoken: list[str] = []
        self._words: list[str] = []

    def prepare(
        self,
        prefix_system_prompt: str | None = None,
        suffix_system_prompt: str | None = None,
        ref_audio: np.ndarray | None = None,
        prompt_wav_path: str | None = None,
        context_previous_marker: str = "\n\nprevious: ",
    ) -> str:
        self.clear_break_event()
        self.clear_session_stop()
        self._reset_streaming_state()
        self.decoder.reset()
        if ref_audio is not None:
            assert isinstance(ref_audio, np.ndarray) and ref_audio.dtype == np.float32
            assert ref_audio.ndim == 1, "ref_audio is mono 16 kHz samples"
        if prompt_wav_path and self.generate_audio:
            with open(prompt_wav_path, "rb"):  # the vocoder reads the file itself
                pass
            self.model.tts.audio_tokenizer.set_stream_cache(prompt_wav_path)
            self.model.token2wav_cache = object()
            self.model.gpu.touch()
            self.voice = True
        self.prepared_with = {
            "prefix_system_prompt": prefix_system_prompt,
            "suffix_system_prompt": suffix_system_prompt,
            "ref_audio": ref_audio,
            "prompt_wav_path": prompt_wav_path,
        }
        text = (prefix_system_prompt or "") + (suffix_system_prompt or "")
        self.decoder.feed(len(text.split()) + (50 if ref_audio is not None else 0))
        self.decoder.register_system_prompt()
        if not (prefix_system_prompt or suffix_system_prompt):
            return ""
        audio = "[audio embedding]" if ref_audio is not None else ""
        return (prefix_system_prompt or "") + audio + (suffix_system_prompt or "")

    def streaming_prefill(
        self,
        audio_waveform: np.ndarray | None = None,
        frame_list: list[Any] | None = None,
        text_list: list[str] | None = None,
        max_slice_nums: int | list[int] = 1,
        batch_vision_feed: bool = False,
    ) -> dict[str, Any]:
        def result(success: bool, reason: str = "") -> dict[str, Any]:
            return {
                "success": success,
                "reason": reason,
                "cost_vision_process": 0.0,
                "cost_vision_embed": 0.0,
                "cost_vision_feed": 0.0,
                "cost_audio_process": 0.001,
                "cost_audio_embed": 0.002,
                "cost_audio_feed": 0.003,
                "cost_all": 0.006,
            }

        if self.is_session_stop_set() or self.is_break_set():
            return result(False)
        has_audio = audio_waveform is not None and len(audio_waveform) > 0
        has_text = text_list is not None and len(text_list) > 0
        if not has_audio and not has_text:
            return result(False)
        self.decoder.feed(1)  # <unit>, before the audio is looked at
        if has_audio:
            assert audio_waveform is not None and audio_waveform.dtype == np.float32
            self.audio_buffer = np.concatenate([self.audio_buffer, audio_waveform])
            first = self.audio_chunk_idx == 0
            need = (self.FIRST_CHUNK_MS if first else self.CHUNK_MS) * self.SAMPLE_RATE // 1000
            if first and len(self.audio_buffer) < need:
                pad = np.zeros(need - len(self.audio_buffer), dtype=np.float32)
                self.audio_buffer = np.concatenate([pad, self.audio_buffer])
            if len(self.audio_buffer) < need:
                self.dangling_units += 1
                return result(
                    False, f"audio not enough: need {need} samples, only {len(self.audio_buffer)}"
                )
            self.audio_buffer = self.audio_buffer[need:]
            self.decoder.feed(AUDIO_TOKENS_PER_UNIT)
            self.audio_chunk_idx += 1
        if has_text:
            assert text_list is not None
            self.decoder.feed(len("".join(text_list).split()))
        self.fed.append(
            {"samples": len(audio_waveform) if has_audio else 0, "text_list": text_list}
        )
        self.pending = True
        return result(True)

    def streaming_generate(
        self,
        prompt_wav_path: str | None = None,
        max_new_speak_tokens_per_chunk: int = 20,
        decode_mode: str = "sampling",
        temperature: float = 0.7,
        top_k: int = 20,
        top_p: float = 0.8,
        listen_prob_scale: float = 1.0,
        listen_top_k: int | None = None,
        text_repetition_penalty: float = 1.05,
        text_repetition_window_size: int = 512,
    ) -> dict[str, Any]:
        if self.model.on_generate is not None:
            self.model.on_generate()
        if self.is_session_stop_set() or self.is_break_set():
            return self._listen(end_of_turn=True)
        if not self.pending:
            return self._listen(end_of_turn=False)
        self.pending = False
        forced = self._generate_count < self.force_listen_count
        self._generate_count += 1
        wants = self.model.wants.pop(0) if self.model.wants else "listen"
        if forced or (wants == "listen" and self.current_turn_ended):
            self.decoder.feed(2)  # <|listen|> ... </unit>
            self.decoder.enforce_window()
            return self._listen(end_of_turn=False)
        # A listen while the turn is open is rewritten to speak on.
        if self.current_turn_ended:
            reply = self.model.replies.pop(0) if self.model.replies else "okay"
            self._words = reply.split()
        self.current_turn_ended = False
        words, self._words = self._words[:WORDS_PER_UNIT], self._words[WORDS_PER_UNIT:]
        end_of_turn = not self._words
        if end_of_turn:
            self.current_turn_ended = True
        self.spoken.extend(words)
        self.decoder.feed(len(words) + 3)
        self.decoder.enforce_window()
        audio = None
        if self.generate_audio and self.voice:
            t = np.arange(24000 * len(words) // WORDS_PER_UNIT, dtype=np.float32) / 24000
            audio = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
            if not end_of_turn and audio.size < 24000:  # left-padded to a second, as token2wav
                audio = np.pad(audio, (24000 - audio.size, 0))
        return {
            "is_listen": False,
            "text": " ".join(words),
            "audio_waveform": audio,
            "end_of_turn": end_of_turn,
            "current_time": self.audio_chunk_idx,
            "cost_llm": 0.05,
            "cost_tts_prep": 0.001,
            "cost_tts": 0.02,
            "cost_token2wav": 0.03,
            "cost_all": 0.1,
            "n_tokens": len(words),
            "n_tts_tokens": 25,
        }

    def _listen(self, *, end_of_turn: bool) -> dict[str, Any]:
        return {
            "is_listen": True,
            "text": "",
            "audio_waveform": np.zeros(24000, dtype=np.float32),  # a second of silence
            "end_of_turn": end_of_turn,
            "current_time": self.audio_chunk_idx,
            "cost_llm": 0.01,
            "cost_tts_prep": 0.0,
            "cost_tts": 0.0,
            "cost_token2wav": 0.0,
            "cost_all": 0.01,
            "n_tokens": 0,
            "n_tts_tokens": 0,
        }
