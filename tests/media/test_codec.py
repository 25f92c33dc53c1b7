import numpy as np

from media.codec import (
    MULAW_SILENCE,
    float_to_pcm16,
    mulaw_decode,
    mulaw_encode,
    pcm16_to_float,
)


def test_mulaw_round_trip_error_stays_within_one_quantisation_step():
    pcm = np.arange(-32768, 32768, dtype=np.int16)
    back = mulaw_decode(mulaw_encode(pcm)).astype(np.int32)
    error = np.abs(back - pcm.astype(np.int32))
    # mu-law steps grow with magnitude: about 1/16 of it, so rounding costs at most half that.
    assert np.all(error <= np.abs(pcm.astype(np.int32)) / 32 + 8)


def test_mulaw_is_one_byte_per_sample_both_ways():
    pcm = np.linspace(-20000, 20000, 160).astype(np.int16)
    encoded = mulaw_encode(pcm)
    assert len(encoded) == 160
    decoded = mulaw_decode(encoded)
    assert decoded.dtype == np.int16
    assert decoded.shape == (160,)


def test_silence_byte_is_digital_zero():
    assert mulaw_encode(np.zeros(4, dtype=np.int16)) == bytes([MULAW_SILENCE]) * 4
    assert np.all(mulaw_decode(bytes([MULAW_SILENCE]) * 4) == 0)


def test_float_input_is_scaled_and_clipped():
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(800) / 8000).astype(np.float32)
    assert mulaw_encode(tone) == mulaw_encode(float_to_pcm16(tone))
    assert mulaw_encode(np.array([3.0, -3.0], dtype=np.float32)) == mulaw_encode(
        np.array([32767, -32768], dtype=np.int16)
    )


def test_float_pcm16_helpers_invert_each_other():
    pcm = np.array([-32768, -1, 0, 1, 12345, 32767], dtype=np.int16)
    as_float = pcm16_to_float(pcm)
    assert as_float.dtype == np.float32
    assert as_float.min() >= -1.0 and as_float.max() < 1.0
    np.testing.assert_array_equal(float_to_pcm16(as_float), pcm)
