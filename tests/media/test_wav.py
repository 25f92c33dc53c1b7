import numpy as np
import pytest

from media.wav import read_wav, write_wav


def test_mono_float_audio_round_trips_through_pcm16(tmp_path):
    samples = np.linspace(-0.9, 0.9, 1000, dtype=np.float32)
    path = tmp_path / "mono.wav"
    write_wav(path, samples, 16000)
    back, rate = read_wav(path)
    assert rate == 16000
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, samples, atol=1 / 32768)


def test_stereo_files_are_mixed_down_to_mono(tmp_path):
    left = np.full(100, 1000, dtype=np.int16)
    right = np.full(100, 3000, dtype=np.int16)
    path = tmp_path / "stereo.wav"
    write_wav(path, np.stack((left, right), axis=1), 8000, channels=2)
    back, rate = read_wav(path)
    assert rate == 8000
    assert back.shape == (100,)
    np.testing.assert_allclose(back, 2000 / 32768, atol=1e-6)


def test_stereo_needs_one_column_per_channel(tmp_path):
    with pytest.raises(ValueError):
        write_wav(tmp_path / "bad.wav", np.zeros(100, dtype=np.int16), 8000, channels=2)
