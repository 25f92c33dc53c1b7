import numpy as np
import pytest

from media.resample import resample
from media.vad import SileroVad, SpeechStarted, SpeechStopped, VoiceActivity
from tests.media.helpers import phone_line

WINDOW = 512  # 32 ms at 16 kHz


def _probs(vad: SileroVad, audio_16k: np.ndarray, chunk: int = 320) -> list[float]:
    probs: list[float] = []
    for i in range(0, audio_16k.size, chunk):
        probs.extend(vad.process(audio_16k[i : i + chunk]))
    return probs


def test_silero_scores_one_probability_per_complete_window():
    vad = SileroVad(16000)
    assert vad.window_samples == WINDOW
    probs = _probs(vad, np.zeros(WINDOW * 5 + 100, dtype=np.float32), chunk=333)
    assert len(probs) == 5
    assert vad.position == 5 * WINDOW
    assert all(0.0 <= p <= 1.0 for p in probs)


def test_silero_hears_speech_through_a_phone_line(speak):
    speech = resample(speak("Hello, I am calling about my appointment on Monday."), 8000, 16000)
    probs = _probs(SileroVad(16000), speech)
    assert max(probs) > 0.9
    assert np.mean(np.array(probs) > 0.5) > 0.4


def test_silero_ignores_silence_and_quiet_noise():
    rng = np.random.default_rng(0)
    hiss = phone_line(rng.standard_normal(16000).astype(np.float32) * 0.003, 8000)
    audio = np.concatenate((np.zeros(16000, dtype=np.float32), resample(hiss, 8000, 16000)))
    probs = _probs(SileroVad(16000), audio)
    assert max(probs) < 0.2


def test_silero_reset_forgets_buffered_audio():
    vad = SileroVad(16000)
    vad.process(np.zeros(WINDOW + 10, dtype=np.float32))
    vad.reset()
    assert vad.position == 0
    assert len(vad.process(np.zeros(WINDOW - 10, dtype=np.float32))) == 0


def _run(activity: VoiceActivity, probs: list[float]) -> list[tuple[int, object]]:
    """Feed window probabilities; return (window index, event) for each event."""
    events = []
    for i, prob in enumerate(probs):
        event = activity.update(prob, (i + 1) * WINDOW)
        if event is not None:
            events.append((i, event))
    return events


def _activity(**kwargs) -> VoiceActivity:
    return VoiceActivity(WINDOW, 16000, **kwargs)


def test_speech_start_is_backdated_to_the_first_speech_window():
    # 60 ms of speech needs two 32 ms windows; the event comes on the second.
    events = _run(_activity(), [0.1, 0.1, 0.9, 0.8, 0.9])
    assert events == [(3, SpeechStarted(2 * WINDOW))]


def test_a_single_loud_window_is_not_speech():
    activity = _activity()
    assert _run(activity, [0.1, 0.9, 0.1, 0.9, 0.2, 0.1]) == []
    assert not activity.speaking


def test_speech_stop_is_dated_to_the_first_silent_window():
    # 100 ms of silence needs four 32 ms windows (three is only 96 ms).
    events = _run(_activity(), [0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert events == [(1, SpeechStarted(0)), (6, SpeechStopped(3 * WINDOW))]


def test_probabilities_between_thresholds_keep_speech_going():
    activity = _activity(start_threshold=0.5, stop_threshold=0.35)
    events = _run(activity, [0.9, 0.9] + [0.4] * 10)
    assert events == [(1, SpeechStarted(0))]
    assert activity.speaking


def test_a_short_pause_does_not_end_speech():
    events = _run(_activity(), [0.9, 0.9, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1])
    assert events == [(1, SpeechStarted(0)), (9, SpeechStopped(6 * WINDOW))]


def test_run_lengths_are_counted_in_samples():
    activity = _activity()
    _run(activity, [0.1, 0.9, 0.9, 0.9])
    assert activity.speaking
    assert activity.speech_samples == 3 * WINDOW
    assert activity.silence_samples == 0
    activity.update(0.1, 5 * WINDOW)
    activity.update(0.1, 6 * WINDOW)
    assert activity.silence_samples == 2 * WINDOW
    assert activity.speech_samples == 5 * WINDOW


def test_lengths_reset_when_speech_ends():
    activity = _activity()
    _run(activity, [0.9, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert not activity.speaking
    assert activity.speech_samples == 0
    assert activity.silence_samples == 5 * WINDOW


def test_thresholds_must_be_ordered():
    with pytest.raises(ValueError):
        VoiceActivity(WINDOW, 16000, start_threshold=0.3, stop_threshold=0.6)
