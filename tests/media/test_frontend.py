import numpy as np
import pytest

from media.codec import MULAW_SILENCE, mulaw_encode
from media.frontend import FrontEnd
from media.vad import SpeechStarted, SpeechStopped
from tests.media.helpers import frames, speech_bounds

TOLERANCE = 150 * 16  # 150 ms on the 16 kHz clock


def _call_audio(speech: np.ndarray) -> np.ndarray:
    pad = np.zeros(8000, dtype=np.float32)
    return np.concatenate((pad, speech, pad))


def _run(front_end: FrontEnd, mulaw: bytes):
    try:
        return [front_end.process(frame) for frame in frames(mulaw)]
    finally:
        front_end.close()


@pytest.mark.parametrize("denoise", [True, False])
def test_speech_is_bracketed_by_start_and_stop_events_near_its_true_edges(speak, denoise):
    audio = _call_audio(speak("What time does the pharmacy close today?"))
    first, last = speech_bounds(audio)
    outputs = _run(FrontEnd(denoise=denoise), mulaw_encode(audio))
    events = [event for out in outputs for event in out.events]
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped]
    assert abs(events[0].sample - 2 * first) <= TOLERANCE
    assert abs(events[1].sample - 2 * last) <= TOLERANCE


def test_speaking_flag_is_true_only_inside_the_utterance(speak):
    audio = _call_audio(speak("Can I change my booking?"))
    outputs = _run(FrontEnd(), mulaw_encode(audio))
    speaking = np.array([out.speaking for out in outputs])
    assert not speaking[:25].any()  # first 0.5 s is silence
    assert speaking.any()
    assert not speaking[-10:].any()  # back to silence by the end


def test_output_audio_is_contiguous_on_the_16_khz_clock(speak):
    audio = _call_audio(speak("Thank you."))
    front_end = FrontEnd()
    outputs = _run(front_end, mulaw_encode(audio))
    position = 0
    for out in outputs:
        assert out.start_sample == position
        assert out.audio.dtype == np.float32
        position += out.audio.size
    assert position == front_end.position
    # The chain may lag, but only by its filter delays (under 55 ms here: the echo
    # canceller's 11 ms, RNNoise's and the resamplers').
    assert 2 * len(outputs) * 160 - position <= 55 * 16


def test_each_vad_window_yields_one_probability():
    front_end = FrontEnd(denoise=False)
    outputs = _run(front_end, bytes([MULAW_SILENCE]) * 160 * 50)
    n_probs = sum(len(out.probs) for out in outputs)
    # Silero hears the line upsampled to 16 kHz: 16000 samples less the filter's delay.
    assert 16000 // 512 - 1 <= n_probs <= 16000 // 512
    assert all(p < 0.2 for out in outputs for p in out.probs)


def test_level_reports_the_callers_loudness_after_echo_cancellation():
    # With no bot audio playing, the canceller passes the caller through unchanged
    # (once its high-pass filter has settled, after the first frame).
    tone = 0.5 * np.sin(2 * np.pi * 440 * np.arange(480) / 8000).astype(np.float32)
    front_end = FrontEnd(denoise=False)
    front_end.process(mulaw_encode(tone[:320]))
    loud = front_end.process(mulaw_encode(tone[320:]))
    front_end.process(bytes([MULAW_SILENCE]) * 160)  # the canceller's 11 ms of tone
    quiet = front_end.process(bytes([MULAW_SILENCE]) * 160)
    front_end.close()
    assert loud.level_db == pytest.approx(-9.0, abs=0.5)
    assert quiet.level_db < loud.level_db - 30  # the filters ring down, then silence
