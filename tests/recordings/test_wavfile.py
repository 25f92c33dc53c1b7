import shutil
import wave

import numpy as np
import pytest

from media.wav import write_wav
from recordings.errors import CorruptRecord
from recordings.wavfile import PLACEHOLDER, StreamingWav, read_pcm16, repair_wav
from tests.recordings.helpers import header_sizes


def ramp(n: int, start: int = 0) -> np.ndarray:
    return (np.arange(start, start + n) % 20000 - 10000).astype(np.int16)


def test_samples_round_trip_and_close_patches_the_header_sizes(tmp_path):
    path = tmp_path / "a.wav"
    wav = StreamingWav(path, 8000)
    wav.append(ramp(1000))
    wav.pad_to(1500)
    wav.append(ramp(250, 7))
    assert wav.samples == 1750
    wav.close()

    assert header_sizes(path) == (36 + 3500, 3500)
    with wave.open(str(path), "rb") as f:
        assert (f.getnchannels(), f.getsampwidth(), f.getframerate()) == (1, 2, 8000)
        assert f.getnframes() == 1750
    samples, rate = read_pcm16(path)
    assert rate == 8000
    assert samples.dtype == np.int16
    np.testing.assert_array_equal(
        samples, np.concatenate((ramp(1000), np.zeros(500), ramp(250, 7)))
    )


def test_an_open_file_has_placeholder_sizes_and_reads_as_it_is(tmp_path):
    path = tmp_path / "open.wav"
    wav = StreamingWav(path)
    wav.append(ramp(3000))
    wav.flush()
    crashed = tmp_path / "crashed.wav"
    shutil.copyfile(path, crashed)  # what a process killed now would leave behind
    wav.close()

    assert header_sizes(crashed) == (PLACEHOLDER, PLACEHOLDER)
    samples, _ = read_pcm16(crashed)
    np.testing.assert_array_equal(samples, ramp(3000))


def test_a_second_of_audio_reaches_the_os_without_an_explicit_flush(tmp_path):
    path = tmp_path / "a.wav"
    wav = StreamingWav(path, 8000)
    wav.append(ramp(8000))
    assert path.stat().st_size == 44 + 16000
    wav.close()


def test_repair_recomputes_placeholder_sizes_from_the_file_length(tmp_path):
    path = tmp_path / "open.wav"
    wav = StreamingWav(path)
    wav.append(ramp(1234))
    wav.flush()
    crashed = tmp_path / "crashed.wav"
    shutil.copyfile(path, crashed)
    wav.close()

    assert repair_wav(crashed) is True
    assert header_sizes(crashed) == (36 + 2468, 2468)
    assert crashed.read_bytes() == path.read_bytes()  # exactly what close() writes
    assert repair_wav(crashed) is False


def test_repair_drops_half_a_sample_left_by_a_torn_write(tmp_path):
    path = tmp_path / "torn.wav"
    wav = StreamingWav(path)
    wav.append(ramp(10))
    wav.flush()
    torn = tmp_path / "torn-copy.wav"
    torn.write_bytes(path.read_bytes() + b"\x07")
    wav.close()

    assert repair_wav(torn) is True
    assert torn.stat().st_size == 44 + 20
    assert header_sizes(torn) == (56, 20)
    np.testing.assert_array_equal(read_pcm16(torn)[0], ramp(10))


def test_repair_leaves_a_complete_file_byte_for_byte(tmp_path):
    path = tmp_path / "done.wav"
    write_wav(path, ramp(500), 8000)
    before = path.read_bytes()
    assert repair_wav(path) is False
    assert path.read_bytes() == before


def test_read_accepts_a_zero_data_size_and_one_larger_than_the_file(tmp_path):
    path = tmp_path / "done.wav"
    write_wav(path, ramp(100), 8000)
    raw = bytearray(path.read_bytes())
    for size in (0, 10_000):
        raw[40:44] = size.to_bytes(4, "little")
        path.write_bytes(raw)
        np.testing.assert_array_equal(read_pcm16(path)[0], ramp(100))


def test_pad_to_never_shortens(tmp_path):
    wav = StreamingWav(tmp_path / "a.wav")
    wav.append(ramp(100))
    wav.pad_to(50)
    assert wav.samples == 100
    wav.close()


def test_only_one_dimensional_int16_audio_is_accepted(tmp_path):
    wav = StreamingWav(tmp_path / "a.wav")
    with pytest.raises(TypeError, match="int16"):
        wav.append(np.zeros(10, dtype=np.float32))
    with pytest.raises(TypeError, match="1-D"):
        wav.append(np.zeros((10, 2), dtype=np.int16))
    wav.close()


def test_close_twice_is_harmless_but_appending_after_close_is_refused(tmp_path):
    wav = StreamingWav(tmp_path / "a.wav")
    wav.close()
    wav.close()
    with pytest.raises(ValueError, match="closed"):
        wav.append(ramp(1))


def test_an_existing_file_is_never_overwritten(tmp_path):
    path = tmp_path / "a.wav"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        StreamingWav(path)
    assert path.read_bytes() == b"precious"


def test_a_file_that_is_not_a_wav_is_a_corrupt_record_naming_it(tmp_path):
    path = tmp_path / "caller.wav"
    path.write_bytes(b"not a wav at all")
    with pytest.raises(CorruptRecord, match=r"caller\.wav: not a RIFF/WAVE file"):
        read_pcm16(path)
    with pytest.raises(CorruptRecord):
        repair_wav(path)
