import numpy as np
import pytest

from media.codec import mulaw_decode, mulaw_encode, pcm16_to_float
from media.denoise import Denoiser
from media.resample import resample
from tests.media.helpers import rms_db

SENTENCE = "Please call me back tomorrow morning about my prescription."


@pytest.fixture(scope="module")
def noisy_call(speak):
    """(clean, noisy) 8 kHz: 1 s silence, speech, 1 s silence, plus white noise at 10 dB SNR."""
    speech = speak(SENTENCE)
    pad = np.zeros(8000, dtype=np.float32)
    clean = np.concatenate((pad, speech, pad))
    noise_power = np.mean(np.square(speech)) / 10.0
    noise = np.random.default_rng(0).standard_normal(clean.size) * np.sqrt(noise_power)
    noisy = pcm16_to_float(mulaw_decode(mulaw_encode(clean + noise.astype(np.float32))))
    return clean, noisy


def _denoise(noisy: np.ndarray) -> tuple[np.ndarray, list[int]]:
    denoiser = Denoiser(8000, 16000)
    try:
        outputs = [denoiser.process(noisy[i : i + 160]) for i in range(0, noisy.size, 160)]
    finally:
        denoiser.close()
    return np.concatenate(outputs), [o.size for o in outputs]


def test_denoiser_removes_most_of_the_noise_between_words(noisy_call):
    _, noisy = noisy_call
    out, _ = _denoise(noisy)
    # Second half of the leading silence: RNNoise has had 0.5 s to learn the noise.
    before = rms_db(noisy[4000:8000])
    after = rms_db(out[8000:16000])
    assert after <= before - 10.0


def test_denoiser_keeps_the_speech(noisy_call):
    clean, noisy = noisy_call
    out, _ = _denoise(noisy)
    reference = resample(clean, 8000, 16000)
    speech = slice(16000, reference.size - 16000)
    got, want = out[speech], reference[speech]
    assert abs(rms_db(got) - rms_db(want)) < 3.0
    similarity = np.dot(got, want) / np.sqrt(np.dot(got, got) * np.dot(want, want))
    assert similarity > 0.9


def _delay(out: np.ndarray, reference: np.ndarray, max_lag: int) -> int:
    """Lag (in samples) at which `out` best matches `reference`; positive = out is late."""
    n = min(out.size, reference.size)

    def score(lag: int) -> float:
        if lag >= 0:
            return float(np.dot(out[lag:n], reference[: n - lag]))
        return float(np.dot(out[: n + lag], reference[-lag:n]))

    return max(range(-max_lag, max_lag + 1), key=score)


def test_denoiser_output_is_time_aligned_with_its_input(noisy_call):
    clean, noisy = noisy_call
    out, _ = _denoise(noisy)
    # RNNoise alone delays by 20 ms (320 samples here); that must be compensated.
    assert abs(_delay(out, resample(clean, 8000, 16000), max_lag=400)) <= 2


def test_denoiser_output_length_tracks_input_length(noisy_call):
    _, noisy = noisy_call
    out, sizes = _denoise(noisy)
    expected = noisy.size * 2
    # Only the RNNoise delay (20 ms) and filter delays (~5 ms) may be outstanding.
    assert expected - 40 * 16 <= out.size <= expected
    fed = np.minimum(np.arange(1, len(sizes) + 1) * 160, noisy.size) * 2
    assert np.all(fed - np.cumsum(sizes) <= 40 * 16)


def test_closed_denoiser_refuses_audio():
    denoiser = Denoiser()
    denoiser.close()
    denoiser.close()  # idempotent
    with pytest.raises(RuntimeError):
        denoiser.process(np.zeros(160, dtype=np.float32))
