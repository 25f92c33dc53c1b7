import numpy as np
import pytest

from media.wav import WavError, read_wav, write_wav


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


# --- any common WAV reads, or fails in one line ---------------------------------------
# The files are made by sox, as users make them: its default for `synth` at 32 bits is
# WAVE_FORMAT_EXTENSIBLE (format tag 65534), which the stdlib `wave` refuses.


def sox_wav(path, *options: str) -> None:
    import subprocess

    subprocess.run(
        ["sox", "-n", "-r", "16000", *options, str(path), "synth", "0.25", "sine", "440"],
        check=True,
        capture_output=True,
    )


def sox_peak(path) -> float:
    import subprocess

    stat = subprocess.run(["sox", str(path), "-n", "stat"], capture_output=True, text=True)
    line = next(line for line in stat.stderr.splitlines() if line.startswith("Maximum amp"))
    return float(line.split(":")[1])


@pytest.mark.parametrize(
    "options",
    [
        ("-b", "8"),
        ("-b", "16"),
        ("-b", "24"),
        ("-b", "32"),
        ("-e", "floating-point", "-b", "32"),
        ("-e", "floating-point", "-b", "64"),
        ("-b", "24", "-c", "2"),
    ],
    ids=["pcm8", "pcm16", "pcm24", "pcm32", "float32", "float64", "pcm24-stereo"],
)
def test_pcm_and_float_wavs_of_any_width_read_as_the_same_tone(tmp_path, options):
    path = tmp_path / "tone.wav"
    sox_wav(path, *options)
    back, rate = read_wav(path)
    assert rate == 16000
    assert back.dtype == np.float32
    assert back.size == 4000
    # The level sox itself reads back (`sox FILE -n stat`), and a 440 Hz tone.
    assert abs(float(np.abs(back).max()) - sox_peak(path)) < 0.01
    spectrum = np.abs(np.fft.rfft(back))
    assert abs(float(np.argmax(spectrum)) * 16000 / back.size - 440) < 8


def test_sox_32_bit_default_is_extensible_and_reads(tmp_path):
    path = tmp_path / "q.wav"
    sox_wav(path, "-b", "32")
    assert int.from_bytes(path.read_bytes()[20:22], "little") == 0xFFFE
    assert read_wav(path)[0].size == 4000


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"hello, this is text", "not a WAV file"),
        (b"", "not a WAV file"),
        (b"RIFF\x04\x00\x00\x00WAVE", "no format chunk"),
    ],
)
def test_a_file_that_is_no_wav_is_refused_in_one_line(tmp_path, content, says):
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(WavError) as caught:
        read_wav(path)
    message = str(caught.value)
    assert says in message and str(path) in message and "\n" not in message


def test_an_unsupported_encoding_is_named(tmp_path):
    path = tmp_path / "alaw.wav"
    sox_wav(path, "-e", "a-law")
    with pytest.raises(WavError, match="format tag 0x0006 audio is not supported"):
        read_wav(path)


def test_a_missing_file_is_refused_in_one_line(tmp_path):
    with pytest.raises(WavError, match="cannot read it"):
        read_wav(tmp_path / "nowhere.wav")
