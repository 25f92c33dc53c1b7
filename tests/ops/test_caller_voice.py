"""The simulated caller's voice: 8 kHz, trimmed, exactly what a phone line delivers."""

from pathlib import Path

import numpy as np
import pytest

from media.codec import mulaw_decode, mulaw_encode
from media.wav import write_wav
from ops.caller_voice import CallerVoice, load_wav_8k, speak, trim_silence

SENTENCE = "Hello, I would like to book a table for two people tomorrow evening."


def _dbfs(x: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))
    return 20 * float(np.log10(max(rms, 1e-9) / 32768))


def _assert_line_audio(audio: np.ndarray) -> None:
    assert audio.dtype == np.int16
    assert audio.ndim == 1
    # Already mu-law: another round trip changes nothing.
    np.testing.assert_array_equal(mulaw_decode(mulaw_encode(audio)), audio)
    # Trimmed: speech starts and ends at the first and last sample.
    assert abs(int(audio[0])) >= 100 and abs(int(audio[-1])) >= 100


def test_espeak_speech_is_8khz_line_audio_of_plausible_length() -> None:
    audio = speak(SENTENCE)

    _assert_line_audio(audio)
    seconds = len(audio) / 8000
    # 12 words at 165 wpm is about 4.4 s; espeak's pauses and prosody vary.
    assert 2.5 < seconds < 7.0
    assert _dbfs(audio) > -30


def test_faster_speech_is_shorter() -> None:
    slow = speak("one two three four five six", rate_wpm=120)
    fast = speak("one two three four five six", rate_wpm=240)

    assert len(fast) < 0.75 * len(slow)


def test_piper_speech_is_8khz_line_audio() -> None:
    audio = CallerVoice(engine="piper").speak("Yes, that works for me.")

    _assert_line_audio(audio)
    assert 0.6 < len(audio) / 8000 < 4.0
    assert _dbfs(audio) > -30


def test_empty_text_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        speak("   ")


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="engine"):
        CallerVoice(engine="festival")


def test_load_wav_8k_resamples_and_trims(tmp_path: Path) -> None:
    rate = 16000
    tone = 0.3 * np.sin(2 * np.pi * 300 * np.arange(rate) / rate).astype(np.float32)
    padded = np.concatenate(
        [np.zeros(rate // 2, np.float32), tone, np.zeros(rate // 4, np.float32)]
    )
    path = tmp_path / "caller.wav"
    write_wav(path, padded, rate)

    audio = load_wav_8k(path)

    _assert_line_audio(audio)
    assert len(audio) == pytest.approx(8000, abs=40)  # 1 s of tone, silence gone


def test_trim_silence_keeps_the_loud_span() -> None:
    x = np.array([0, 5, -20, 400, 0, -300, 10, 0], dtype=np.int16)

    np.testing.assert_array_equal(trim_silence(x), [400, 0, -300])
    assert trim_silence(np.zeros(10, np.int16)).size == 0


def test_espeak_says_a_sentence_paused_in_the_middle_as_one_sentence() -> None:
    voice = CallerVoice("espeak", 160, "en-us")
    audio, start, end = voice.speak_paused("I would like a table for", 800, "four people tonight")

    assert 700 <= (end - start) / 8 <= 900  # the pause, as asked for
    pause, speech = audio[start:end].astype(float), audio[:start].astype(float)
    assert np.sqrt(np.mean(pause**2)) < 0.02 * np.sqrt(np.mean(speech**2))
    # Said on its own, the first half would end like a finished sentence: drawn out, its
    # pitch falling. Mid-sentence it runs on into the pause.
    assert start < voice.speak("I would like a table for").size - 8 * 40
    assert audio.size - end == pytest.approx(voice.speak("four people tonight").size, abs=160)


def test_piper_says_a_paused_sentence_in_two_parts() -> None:
    voice = CallerVoice("piper", 160)
    audio, start, end = voice.speak_paused("I would like", 500, "a table")

    # (Piper draws its voice anew each time: the two parts' lengths vary a little.)
    assert end - start == 4000 and not audio[start:end].any()
    assert start == pytest.approx(voice.speak("I would like").size, rel=0.15)
    assert audio.size - end == pytest.approx(voice.speak("a table").size, rel=0.15)
    assert np.abs(audio[:start]).max() > 1000 and np.abs(audio[end:]).max() > 1000


def test_a_paused_sentence_needs_words_on_both_sides_and_a_pause() -> None:
    voice = CallerVoice("espeak", 160)
    with pytest.raises(ValueError, match="both sides"):
        voice.speak_paused("Hello", 500, " ")
    with pytest.raises(ValueError, match="at least 1 ms"):
        voice.speak_paused("Hello", 0, "there")


def test_the_pause_found_is_the_one_asked_for_not_a_full_stop_before_it() -> None:
    # At 120 wpm espeak-ng's own pause after "once." (~550 ms) outlasts the 400 ms asked.
    voice = CallerVoice("espeak", 120, "en-us")
    first = "It means you only live once. Where did you"
    _, start, end = voice.speak_paused(first, 400, "hear that?")

    assert 350 <= (end - start) / 8 <= 500
    assert abs(start - voice.speak(first).size) < 8 * 200  # after "you", not "once."
