import numpy as np
import pytest

from media.polyphase import PolyphaseResampler
from media.resample import StreamResampler, make_stream_resampler, resample


def _tone(freq: float, rate: int, seconds: float = 1.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def _stream(resampler, signal: np.ndarray, chunk: int) -> tuple[np.ndarray, list[int]]:
    outputs = [resampler.process(signal[i : i + chunk]) for i in range(0, signal.size, chunk)]
    outputs.append(resampler.flush())
    return np.concatenate(outputs), [o.size for o in outputs]


def _level_db(x: np.ndarray) -> float:
    return float(10 * np.log10(np.mean(np.square(x, dtype=np.float64)) + 1e-30))


@pytest.mark.parametrize("kind", [StreamResampler, PolyphaseResampler])
@pytest.mark.parametrize(("in_rate", "out_rate"), [(8000, 16000), (8000, 48000), (48000, 16000)])
def test_streamed_output_length_tracks_input_length(kind, in_rate, out_rate):
    signal = np.random.default_rng(1).standard_normal(in_rate).astype(np.float32) * 0.1
    out, _ = _stream(kind(in_rate, out_rate), signal, chunk=in_rate // 50)
    assert out.dtype == np.float32
    assert abs(out.size - out_rate) <= 1


@pytest.mark.parametrize("kind", [StreamResampler, PolyphaseResampler])
def test_downsampling_suppresses_tones_above_the_new_nyquist(kind):
    tone = _tone(5000, 24000)  # would alias to 3 kHz at 8 kHz
    out, _ = _stream(kind(24000, 8000), tone, chunk=480)
    middle = out[800:-800]
    assert _level_db(middle) - _level_db(tone) < -60


@pytest.mark.parametrize("kind", [StreamResampler, PolyphaseResampler])
def test_passband_tone_keeps_its_level_and_timing(kind):
    tone = _tone(1000, 8000)
    out, _ = _stream(kind(8000, 16000), tone, chunk=160)
    expected = _tone(1000, 16000)
    # Output sample k must sit at input time k / 16000: no uncompensated delay.
    assert np.max(np.abs(out[400:-400] - expected[400:-400])) < 0.01


def test_polyphase_emits_audio_for_every_frame_after_the_first():
    # soxr's streaming mode holds 8 kHz input back in ~100 ms blocks; a live VAD
    # path needs every 20 ms frame to come out (almost) at once.
    signal = np.random.default_rng(2).standard_normal(8000).astype(np.float32) * 0.1
    _, sizes = _stream(PolyphaseResampler(8000, 16000), signal, chunk=160)
    assert all(size == 320 for size in sizes[1:-1])
    assert PolyphaseResampler(8000, 16000).latency_samples * 1000 // 8000 <= 5


def test_polyphase_output_does_not_depend_on_chunking():
    signal = np.random.default_rng(3).standard_normal(4800).astype(np.float32) * 0.1
    whole, _ = _stream(PolyphaseResampler(48000, 16000), signal, chunk=signal.size)
    pieces, _ = _stream(PolyphaseResampler(48000, 16000), signal, chunk=137)
    np.testing.assert_allclose(pieces, whole, atol=1e-6)


def test_reset_starts_a_fresh_stream():
    signal = np.random.default_rng(4).standard_normal(800).astype(np.float32) * 0.1
    for resampler in (StreamResampler(8000, 16000), PolyphaseResampler(8000, 16000)):
        first, _ = _stream(resampler, signal, chunk=160)
        resampler.reset()
        second, _ = _stream(resampler, signal, chunk=160)
        np.testing.assert_allclose(second, first, atol=1e-6)


def test_equal_rates_pass_audio_through_untouched():
    signal = np.random.default_rng(5).standard_normal(160).astype(np.float32)
    for resampler in (StreamResampler(8000, 8000), make_stream_resampler(8000, 8000)):
        np.testing.assert_array_equal(resampler.process(signal), signal)
        assert resampler.flush().size == 0
    np.testing.assert_array_equal(resample(signal, 8000, 8000), signal)


def test_one_shot_resample_converts_length_and_dtype():
    out = resample(_tone(440, 22050).astype(np.float64), 22050, 8000)
    assert out.dtype == np.float32
    assert abs(out.size - 8000) <= 1
