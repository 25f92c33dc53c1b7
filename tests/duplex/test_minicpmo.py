"""MiniCPMOBackend drives MiniCPM-o 4.5's real duplex API (here: the faithful fake beside
this file, tests/duplex/fake_minicpmo.py, which names the source it mirrors)."""

from __future__ import annotations

import asyncio
import importlib.machinery
import sys
import threading
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from agents.duplex.minicpmo import (
    FIRST_UNIT_SAMPLES,
    OUTPUT_RATE,
    PROMPT_PREFIX,
    PROMPT_SUFFIX,
    UNIT_SAMPLES,
    LoadedModel,
    MiniCPMOBackend,
    duplex_config,
    load_minicpmo,
)
from agents.duplex.omni_voice import VOICE_RATE, default_voice_wav, load_voice
from agents.duplex.protocol import Prepare
from agents.errors import BackendError, BackendUnavailable
from media.wav import read_wav, write_wav
from tests.duplex.fake_minicpmo import (
    SESSION_KV_BYTES,
    WEIGHTS_BYTES,
    FakeDuplex,
    FakeMiniCPMO,
)

SECOND = np.zeros(UNIT_SAMPLES, dtype=np.float32)


@pytest.fixture
def voice_wav(tmp_path: Path) -> Path:
    path = tmp_path / "voice.wav"
    t = np.arange(3 * 22050) / 22050
    write_wav(path, (0.2 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 22050)
    return path


def backend_for(model: FakeMiniCPMO, voice: Path) -> MiniCPMOBackend:
    def loader() -> LoadedModel:
        return LoadedModel(duplex=model.as_duplex(**duplex_config()), cuda=model.gpu)

    return MiniCPMOBackend(voice_wav=lambda: voice, loader=loader)


async def started(model: FakeMiniCPMO, voice: Path, **prepare: Any) -> MiniCPMOBackend:
    backend = backend_for(model, voice)
    await backend.load()
    await backend.prepare(Prepare(system_prompt="Be brief.", **prepare))
    return backend


def fake(backend: MiniCPMOBackend) -> FakeDuplex:
    duplex = backend.duplex
    assert isinstance(duplex, FakeDuplex)
    return duplex


async def test_prepare_wraps_the_persona_and_gives_the_voice_to_the_llm_and_the_vocoder(
    voice_wav: Path,
) -> None:
    model = FakeMiniCPMO()
    history = [{"role": "assistant", "content": "Hello!"}]
    backend = await started(model, voice_wav, history=history)
    prepared = fake(backend).prepared_with
    assert prepared["prefix_system_prompt"] == PROMPT_PREFIX.format(
        text="Be brief.\nassistant: Hello!"
    )
    assert prepared["prefix_system_prompt"].startswith("<|im_start|>system\n")
    assert prepared["suffix_system_prompt"] == PROMPT_SUFFIX == "<|audio_end|><|im_end|>"
    ref = prepared["ref_audio"]
    assert ref.dtype == np.float32 and ref.size == 3 * VOICE_RATE  # resampled to 16 kHz
    assert prepared["prompt_wav_path"] == str(voice_wav)
    assert model.duplex_config["sliding_window_mode"] == "basic"
    assert backend.keypad_input


async def test_listen_units_feed_a_1035_ms_first_unit_then_seconds_and_play_nothing(
    voice_wav: Path,
) -> None:
    model = FakeMiniCPMO(wants=["listen"] * 5)
    backend = await started(model, voice_wav)
    after_prompt = fake(backend).decoder.get_cache_length()
    outcomes = [await backend.process_unit(SECOND) for _ in range(3)]
    assert [o.action for o in outcomes] == ["listen"] * 3
    assert all(o.audio.size == 0 for o in outcomes)  # the model's 24 kHz silence is dropped
    assert [f["samples"] for f in fake(backend).fed] == [
        FIRST_UNIT_SAMPLES,
        UNIT_SAMPLES,
        UNIT_SAMPLES,
    ]
    assert FIRST_UNIT_SAMPLES == 16560
    assert outcomes[-1].context_len == fake(backend).decoder.get_cache_length() > after_prompt
    assert outcomes[0].context_len < outcomes[1].context_len < outcomes[2].context_len
    assert {"prefill", "generate", "model"} <= outcomes[0].timings.keys()


async def test_a_speaking_unit_carries_24_khz_audio_and_the_turn_stays_open_until_turn_eos(
    voice_wav: Path,
) -> None:
    # The first three units are forced listens (the greeting plays out); then the model
    # wants to speak once and to listen after, but its open turn keeps it speaking.
    model = FakeMiniCPMO(
        wants=["listen"] * 3 + ["speak", "listen", "listen", "listen"],
        replies=["Sure, I can help with that today."],
    )
    backend = await started(model, voice_wav)
    for _ in range(3):
        assert (await backend.process_unit(SECOND)).action == "listen"
    first = await backend.process_unit(SECOND)
    assert first.action == "speak" and first.text == "Sure, I can"
    assert first.sample_rate == OUTPUT_RATE == 24000 and first.audio.size == OUTPUT_RATE
    assert first.audio.dtype == np.float32 and np.abs(first.audio).max() > 0.1
    assert not first.end_of_turn
    second = await backend.process_unit(SECOND)  # it wanted to listen: the turn is open
    assert second.action == "speak" and second.text == "help with that"
    last = await backend.process_unit(SECOND)
    assert last.action == "speak" and last.text == "today." and last.end_of_turn
    assert (await backend.process_unit(SECOND)).action == "listen"  # turn over: it may listen


async def test_a_long_gateway_unit_is_two_model_units_merged(voice_wav: Path) -> None:
    model = FakeMiniCPMO(wants=["speak", "speak"], replies=["one two three four five"])
    backend = backend_for(model, voice_wav)
    await backend.load()
    fake(backend).force_listen_count = 0
    await backend.prepare(Prepare(system_prompt=""))
    outcome = await backend.process_unit(np.zeros(2 * UNIT_SAMPLES + 560, dtype=np.float32))
    assert [f["samples"] for f in fake(backend).fed] == [FIRST_UNIT_SAMPLES, UNIT_SAMPLES]
    assert outcome.text == "one two three four five" and outcome.end_of_turn
    assert outcome.audio.size > OUTPUT_RATE


async def test_short_gateway_units_wait_until_a_whole_model_unit_is_there(
    voice_wav: Path,
) -> None:
    model = FakeMiniCPMO()
    backend = await started(model, voice_wav)
    fifth = np.zeros(UNIT_SAMPLES // 5, dtype=np.float32)  # UNIT_MS=200
    for _ in range(4):
        await backend.process_unit(fifth)
    assert fake(backend).fed == []  # nothing fed: a short unit would corrupt the context
    await backend.process_unit(fifth)
    for _ in range(5):
        await backend.process_unit(fifth)
    assert [f["samples"] for f in fake(backend).fed] == [FIRST_UNIT_SAMPLES, UNIT_SAMPLES]
    assert fake(backend).dangling_units == 0


def test_the_fake_refuses_a_short_unit_after_the_first_as_the_real_model_does() -> None:
    duplex = FakeMiniCPMO().as_duplex(**duplex_config())
    duplex.prepare(prefix_system_prompt="x")
    assert duplex.streaming_prefill(audio_waveform=np.zeros(8000, np.float32))["success"]
    short = duplex.streaming_prefill(audio_waveform=np.zeros(8000, np.float32))
    assert not short["success"] and short["reason"].startswith("audio not enough")
    assert duplex.dangling_units == 1


async def test_a_refused_unit_is_a_backend_error(voice_wav: Path) -> None:
    model = FakeMiniCPMO()
    backend = await started(model, voice_wav)
    fake(backend).set_break_event()  # prefill now answers success=False
    with pytest.raises(BackendError, match="refused a unit"):
        await backend.process_unit(SECOND)


async def test_keypad_digits_reach_the_model_as_text_with_the_next_unit(voice_wav: Path) -> None:
    model = FakeMiniCPMO()
    backend = await started(model, voice_wav)
    await backend.process_unit(SECOND)
    await backend.keypad("42")
    await backend.process_unit(SECOND[:8000])  # not a whole unit yet: the keys wait
    await backend.process_unit(SECOND[:8000])
    fed = fake(backend).fed
    assert fed[0]["text_list"] is None
    assert fed[1]["text_list"] == ["(the caller pressed 4 2 on the keypad)"]
    assert (await backend.process_unit(SECOND)).action == "listen"  # the session goes on
    assert fake(backend).fed[2]["text_list"] is None


async def test_cleanup_stops_the_session_and_hands_its_gpu_memory_back(voice_wav: Path) -> None:
    model = FakeMiniCPMO(wants=["listen"] * 3 + ["speak"], replies=["hello there friend"])
    backend = await started(model, voice_wav)
    for _ in range(4):
        await backend.process_unit(SECOND)
    session_bytes = model.gpu.memory_allocated() - WEIGHTS_BYTES
    assert session_bytes > SESSION_KV_BYTES  # KV + vocoder + token2wav caches
    await backend.finalize_unit()  # a no-op: nothing happens to the model
    assert model.gpu.memory_allocated() - WEIGHTS_BYTES == session_bytes
    await backend.cleanup()
    duplex = fake(backend)
    assert duplex.is_session_stop_set()
    assert duplex.decoder.get_cache_length() == 0
    assert model.gpu.memory_allocated() == WEIGHTS_BYTES
    assert model.gpu.memory_reserved() == WEIGHTS_BYTES  # empty_cache handed it back
    assert backend.memory_mb() == WEIGHTS_BYTES / 2**20
    # The next call prepares afresh: stop cleared, the voice set again.
    await backend.prepare(Prepare(system_prompt="again"))
    assert not duplex.is_session_stop_set()
    assert (await backend.process_unit(SECOND)).action == "listen"


async def test_cleanup_stops_a_unit_in_flight_and_waits_for_it(voice_wav: Path) -> None:
    in_generate = threading.Event()
    model = FakeMiniCPMO()

    def slow_generate() -> None:
        in_generate.set()
        duplex = fake(backend)
        assert duplex.session_stop_event.wait(5), "cleanup never stopped the session"

    backend = await started(model, voice_wav)
    model.on_generate = slow_generate
    unit = asyncio.create_task(backend.process_unit(SECOND))
    await asyncio.to_thread(in_generate.wait, 5)
    await backend.cleanup()
    outcome = await unit  # the stopped generate answered a listen
    assert outcome.action == "listen"
    assert model.gpu.memory_allocated() == WEIGHTS_BYTES


async def test_without_a_voice_the_model_speaks_text_only(tmp_path: Path) -> None:
    """Why prepare always passes prompt_wav_path: the real model needs it for audio."""
    duplex = FakeMiniCPMO(wants=["speak"], replies=["hi"]).as_duplex(**duplex_config())
    duplex.force_listen_count = 0
    duplex.prepare(prefix_system_prompt="x")
    assert duplex.streaming_prefill(audio_waveform=SECOND)["success"]
    spoken = duplex.streaming_generate()
    assert spoken["text"] == "hi" and spoken["audio_waveform"] is None


def test_a_misspelt_name_fails_against_the_fake() -> None:
    model = FakeMiniCPMO()
    with pytest.raises(TypeError):
        model.as_duplex(sliding_window="basic")
    duplex = model.as_duplex()
    with pytest.raises(TypeError):
        duplex.prepare(system_prompt="x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        duplex.streaming_prefill(audio=SECOND)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        duplex.streaming_generate(force_listen=True)  # type: ignore[call-arg]
    assert "audio_data" not in duplex.streaming_generate()


# -- loading ----------------------------------------------------------------------------


class FakeAutoModel:
    model: ClassVar[FakeMiniCPMO] = FakeMiniCPMO()
    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    error: ClassVar[BaseException | None] = None

    @classmethod
    def from_pretrained(cls, model_id: str, **kwargs: Any) -> FakeMiniCPMO:
        cls.calls.append((model_id, kwargs))
        if cls.error is not None:
            raise cls.error
        return cls.model


@pytest.fixture
def gpu_stack(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """torch, transformers and stepaudio2 as the GPU box has them; tests then break one."""
    FakeAutoModel.model = FakeMiniCPMO()
    FakeAutoModel.calls = []
    FakeAutoModel.error = None
    torch = types.ModuleType("torch")
    torch.bfloat16 = "bfloat16"  # type: ignore[attr-defined]
    torch.cuda = FakeAutoModel.model.gpu  # type: ignore[attr-defined]
    transformers = types.ModuleType("transformers")
    transformers.__version__ = "4.51.0"  # type: ignore[attr-defined]
    transformers.AutoModel = FakeAutoModel  # type: ignore[attr-defined]
    stepaudio2 = types.ModuleType("stepaudio2")
    stepaudio2.__spec__ = importlib.machinery.ModuleSpec("stepaudio2", None)
    for name, module in (
        ("torch", torch),
        ("transformers", transformers),
        ("stepaudio2", stepaudio2),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    return types.SimpleNamespace(torch=torch, transformers=transformers)


def test_load_opens_the_duplex_view_on_the_gpu(gpu_stack: types.SimpleNamespace) -> None:
    loaded = load_minicpmo("openbmb/MiniCPM-o-4_5")
    model_id, kwargs = FakeAutoModel.calls[0]
    assert model_id == "openbmb/MiniCPM-o-4_5"
    assert kwargs["trust_remote_code"] is True and kwargs["init_tts"] is True
    assert kwargs["init_audio"] is True and kwargs["init_vision"] is False
    assert FakeAutoModel.model.on_cuda
    assert isinstance(loaded.duplex, FakeDuplex)
    assert loaded.cuda.empty_cache_calls == 1


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("no torch", r"offhook\[omni\]"),
        ("transformers 4.57", r"transformers 4\.51\..*offhook\[omni\]"),
        ("no stepaudio2", r"stepaudio2.*minicpmo-utils\[all\]"),
        ("no cuda", "CUDA GPU"),
        ("no weights", "pre-seed the Hugging Face cache"),
        ("remote code import", r"offhook\[omni\]"),
        ("no token2wav assets", "assets/token2wav"),
        ("not minicpmo", "no as_duplex"),
    ],
)
def test_every_load_failure_is_backend_unavailable_saying_what_to_do(
    gpu_stack: types.SimpleNamespace,
    monkeypatch: pytest.MonkeyPatch,
    breakage: str,
    message: str,
) -> None:
    match breakage:
        case "no torch":
            monkeypatch.setitem(sys.modules, "torch", None)  # import torch → ImportError
        case "transformers 4.57":
            gpu_stack.transformers.__version__ = "4.57.1"
        case "no stepaudio2":
            monkeypatch.delitem(sys.modules, "stepaudio2")
        case "no cuda":
            monkeypatch.setattr(FakeAutoModel.model.gpu, "is_available", lambda: False)
        case "no weights":
            FakeAutoModel.error = OSError("openbmb/MiniCPM-o-4_5 is not in the cache")
        case "remote code import":
            FakeAutoModel.error = ImportError("No module named 'librosa'")
        case "no token2wav assets":

            def as_duplex(**kwargs: Any) -> None:
                raise FileNotFoundError("assets/token2wav/flow.pt")

            monkeypatch.setattr(FakeAutoModel.model, "as_duplex", as_duplex)
        case "not minicpmo":
            FakeAutoModel.model = types.SimpleNamespace(  # type: ignore[assignment]
                eval=lambda: FakeAutoModel.model, cuda=lambda: FakeAutoModel.model
            )
    with pytest.raises(BackendUnavailable, match=message):
        load_minicpmo()


async def test_a_missing_voice_wav_is_backend_unavailable_before_the_model_loads(
    tmp_path: Path,
) -> None:
    loads: list[int] = []

    def loader() -> LoadedModel:
        loads.append(1)
        raise AssertionError("the model must not load without a voice")

    backend = MiniCPMOBackend(voice_wav=lambda: tmp_path / "nope.wav", loader=loader)
    with pytest.raises(BackendUnavailable, match="OMNI_VOICE_WAV"):
        await backend.load()
    assert loads == []


def test_the_default_voice_is_the_bundled_piper_voice_at_16_khz(tmp_path: Path) -> None:
    path = default_voice_wav(tmp_path)
    audio, rate = read_wav(path)
    assert rate == VOICE_RATE and 5 * rate < audio.size < 15 * rate
    assert np.abs(audio).max() > 0.1
    assert default_voice_wav(tmp_path) == path  # made once
    assert load_voice(path).size == audio.size


def test_importing_the_module_does_not_import_torch() -> None:
    import agents.duplex.minicpmo  # noqa: F401 - the import is what is tested

    assert "torch" not in sys.modules or sys.modules["torch"] is None
