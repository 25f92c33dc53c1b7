"""`offhook worker --backend minicpmo --self-test QUESTION.wav`, with the fake model injected."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from agents.duplex.minicpmo import LoadedModel, duplex_config
from agents.duplex.worker_cli import worker_main
from app.settings import Settings
from media.wav import read_wav, write_wav
from tests.duplex.fake_minicpmo import WEIGHTS_BYTES, FakeMiniCPMO


def wav(path: Path, seconds: float, rate: int = 16000) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    write_wav(path, (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32), rate)
    return path


def test_the_self_test_answers_the_question_and_reports_units_kv_and_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = FakeMiniCPMO(wants=["listen"] * 3 + ["speak"], replies=["Paris is the capital."])
    voice = wav(tmp_path / "voice.wav", 4, rate=22050)
    question = wav(tmp_path / "question.wav", 2.5, rate=8000)
    reply = tmp_path / "reply.wav"

    def loader() -> LoadedModel:
        return LoadedModel(duplex=model.as_duplex(**duplex_config()), cuda=model.gpu)

    status = worker_main(
        ["--backend", "minicpmo", "--self-test", str(question), "--reply-wav", str(reply)],
        load_settings=lambda: Settings.from_env({"OMNI_VOICE_WAV": str(voice)}),
        minicpmo_loader=loader,
    )
    out = capsys.readouterr().out
    assert status == 0, out
    audio, rate = read_wav(reply)
    assert rate == 24000 and audio.size >= 24000
    lines = out.splitlines()
    units = [line for line in lines if line.startswith("unit ")]
    assert len(units) == 13  # 2.5 s of question and 10.5 s of silence, in whole units
    assert "prefill     0 ms" not in out  # every unit was fed to the model
    assert "speak" in units[3] and "Paris is the" in units[3] and "kv " in units[3]
    assert "<turn end>" in units[4]
    assert "prefill" in units[0] and "generate" in units[0] and " ms" in units[0]
    before = next(line for line in lines if line.startswith("GPU before cleanup"))
    after = next(line for line in lines if line.startswith("GPU after cleanup"))
    weights_mb = f"{WEIGHTS_BYTES / 2**20:,.0f} MB"
    assert weights_mb not in before.split("reserved")[0]  # the session holds memory ...
    assert after == f"GPU after cleanup:  allocated {weights_mb}, reserved {weights_mb}"
    assert "Paris is the capital." in out


def test_a_self_test_on_a_box_without_the_omni_packages_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is importable here: the backend would try to load for real")
    voice = wav(tmp_path / "voice.wav", 4)
    status = worker_main(
        ["--backend", "minicpmo", "--self-test", str(wav(tmp_path / "q.wav", 1))],
        load_settings=lambda: Settings.from_env({"OMNI_VOICE_WAV": str(voice)}),
    )
    assert status == 2
    assert "pip install 'offhook[omni]'" in capsys.readouterr().err


def test_the_self_test_is_for_the_minicpmo_backend_only(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        worker_main(
            ["--backend", "cascade", "--self-test", str(tmp_path / "q.wav")],
            load_settings=lambda: Settings.from_env({}),
        )
