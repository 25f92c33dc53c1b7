"""Echo cancellation: the bot's played audio comes back late and quieter, and is removed.

The far end is Piper-like speech (espeak here), the echo is that speech delayed and
attenuated as a speakerphone returns it, mu-law quantised like everything on the line.
Cancellation is judged after AEC3 has had two seconds to find the delay, the way a
call's greeting gives it time to.
"""

from __future__ import annotations

import numpy as np
import pytest

from media.codec import mulaw_encode
from media.echo import AEC_DELAY_SAMPLES, REFERENCE_LEAD_MS, EchoCanceller
from media.frontend import FrontEnd
from media.playout import PlayoutClock
from media.vad import SpeechStarted
from ops.caller_voice import speak
from tests.media.helpers import BOT_LINE, rms_db

RATE = 8000
NEAR_TEXT = "I would like to book a table for two people tonight."


@pytest.fixture(scope="module")
def far() -> np.ndarray:
    return np.tile(speak(BOT_LINE).astype(np.float32) / 32768, 2)


def echo_of(far: np.ndarray, delay_ms: float, level_db: float = -10.0) -> np.ndarray:
    """The far end as it comes back: `delay_ms` late (negative: early) and quieter."""
    shift = round(delay_ms * RATE / 1000)
    echo = np.zeros_like(far)
    if shift >= 0:
        echo[shift:] = far[: far.size - shift]
    else:
        echo[:shift] = far[-shift:]
    return echo * np.float32(10 ** (level_db / 20))


def cancel(capture: np.ndarray, reference: np.ndarray) -> np.ndarray:
    canceller = EchoCanceller()
    out = np.concatenate(
        [
            canceller.process(capture[i : i + 160], reference[i : i + 160])
            for i in range(0, capture.size - 159, 160)
        ]
    )
    canceller.close()
    return out


def residual_db(echo: np.ndarray, out: np.ndarray, start_s: float = 2.0) -> float:
    """How far the echo was pushed down after `start_s` (echo return loss enhancement)."""
    lo = int(start_s * RATE)
    return rms_db(echo[lo : out.size]) - rms_db(out[lo:])


@pytest.mark.parametrize("delay_ms", [60, 150, 300, 450])
def test_echo_behind_the_reference_is_cancelled_whatever_the_delay(
    far: np.ndarray, delay_ms: int
) -> None:
    echo = echo_of(far, delay_ms)
    assert residual_db(echo, cancel(echo, far)) > 25


def test_a_change_of_delay_mid_call_is_followed(far: np.ndarray) -> None:
    half = far.size // 2
    echo = np.concatenate([echo_of(far, 150)[:half], echo_of(far, 300)[half:]])
    out = cancel(echo, far)
    # Two seconds after the path changed, AEC3 has found the new delay.
    settled = half + 2 * RATE
    assert rms_db(echo[settled : out.size]) - rms_db(out[settled:]) > 25


def test_the_callers_own_voice_goes_through_while_the_bot_echoes(far: np.ndarray) -> None:
    near = np.zeros_like(far)
    voice = speak(NEAR_TEXT).astype(np.float32) / 32768 * 0.5
    at = 3 * RATE
    near[at : at + voice.size] = voice
    out = cancel(echo_of(far, 150) + near, far)
    # Double talk: the caller loses a little level, never their words.
    assert rms_db(out[at : at + voice.size]) > rms_db(voice) - 6


def test_output_sample_k_is_input_sample_k() -> None:
    rng = np.random.default_rng(3)
    capture = np.zeros(8000, np.float32)
    capture[2000:6000] = rng.normal(0, 0.1, 4000)
    out = cancel(capture, np.zeros_like(capture))
    assert out.size == capture.size - AEC_DELAY_SAMPLES  # the delay is still in the pipe
    corr = np.correlate(out[1000:7000], capture[1000:7000], "full")
    assert int(np.argmax(corr)) - (6000 - 1) == 0


def test_capture_and_reference_must_cover_the_same_samples() -> None:
    canceller = EchoCanceller()
    with pytest.raises(ValueError, match="same samples"):
        canceller.process(np.zeros(160, np.float32), np.zeros(80, np.float32))
    canceller.close()
    with pytest.raises(RuntimeError, match="closed"):
        canceller.process(np.zeros(160, np.float32), np.zeros(160, np.float32))


# --- the front end: the reference read from the playout schedule ---------------------


def run_call_front_end(far: np.ndarray, echo_delay_ms: float, *, echo_cancel: bool) -> list:
    """The bot's audio scheduled on a PlayoutClock, its echo in the caller's line.

    `echo_delay_ms` is measured from where the schedule says the audio played; negative
    means the schedule runs late (the reference behind the echo).
    """
    # Set up as a call's (agents/playback.py): audio starts REFERENCE_LEAD_MS after it is
    # sent, and the reference is read the clock's `reference_lead` ahead (20 ms).
    lead = RATE * REFERENCE_LEAD_MS // 1000
    clock = PlayoutClock(RATE, min_latency=lead, learn_latency=True)
    ahead = clock.reference_lead
    pcm = np.rint(far * 32767).astype(np.int16)
    clock.sent("m1", pcm.size, "greeting", 0, now=0, pcm=pcm)
    played = clock.render(0, far.size + lead)  # where the schedule puts it
    echo = echo_of(played, echo_delay_ms)
    front = FrontEnd(denoise=True, echo_cancel=echo_cancel)
    events = []
    for i in range(0, echo.size - 159, 160):
        reference = clock.render(i + ahead, i + 160 + ahead)
        out = front.process(mulaw_encode(echo[i : i + 160]), reference)
        events += out.events
    front.close()
    return events


# Read as a call reads it, 20 ms ahead, the reference leads an echo the schedule puts 10
# ms early by 10 ms: enough. At 20 ms early the two coincide and AEC3 cannot cancel
# (measured: echo runs of 0.2-1.4 s). In a call the echo comes back at least the phone
# leg's round trip after Twilio's mark says the audio played, so it is never early.
@pytest.mark.parametrize("echo_delay_ms", [-10, 0, 60, 150, 300])
def test_with_the_schedule_early_or_late_the_echo_never_sounds_like_speech(
    far: np.ndarray, echo_delay_ms: int
) -> None:
    events = run_call_front_end(far, echo_delay_ms, echo_cancel=True)
    runs = list(zip(events[::2], events[1::2], strict=False))
    speech = [(a.sample / 16, (b.sample - a.sample) / 16) for a, b in runs if a.sample > 2 * 16000]
    # Nothing that could pass for a caller: no run near the 600 ms a barge-in needs.
    assert all(ms < 300 for _, ms in speech), f"echo heard as speech: {speech} (start, ms)"


def test_without_cancellation_the_same_echo_is_heard_as_speech(far: np.ndarray) -> None:
    events = run_call_front_end(far, 150, echo_cancel=False)
    assert any(isinstance(e, SpeechStarted) for e in events)


def test_with_the_bot_silent_whisper_hears_the_line_untouched(far: np.ndarray) -> None:
    """Nothing to cancel: the front end passes the line itself (11 ms later), not the
    canceller's processed version, which costs Whisper words on noisy lines."""
    voice = far[: 2 * RATE]
    frames = [mulaw_encode(voice[i : i + 160]) for i in range(0, voice.size - 159, 160)]
    outputs = []
    for echo_cancel in (True, False):
        front = FrontEnd(echo_cancel=echo_cancel)
        outputs.append(np.concatenate([front.process(f).audio for f in frames]))
        front.close()
    with_aec, without = outputs
    # The same samples on the same clock; with the canceller they arrive 11 ms later.
    assert without.size - with_aec.size == 2 * AEC_DELAY_SAMPLES
    np.testing.assert_allclose(with_aec, without[: with_aec.size], atol=1e-6)


def test_the_canceller_counts_as_settled_after_two_seconds_of_the_bot(far: np.ndarray) -> None:
    front = FrontEnd()
    span = range(0, 3 * RATE, 160)
    echo = echo_of(far, 150)
    settled = [
        front.process(mulaw_encode(echo[i : i + 160]), far[i : i + 160]).echo_settled for i in span
    ]
    front.close()
    first_settled = settled.index(True)
    assert not any(settled[:first_settled]) and all(settled[first_settled:])
    assert 2.0 <= first_settled * 0.02 <= 3.0  # 2 s of the bot talking, not its pauses


def test_a_line_with_no_echo_path_has_nothing_to_settle(far: np.ndarray) -> None:
    front = FrontEnd()
    silence = mulaw_encode(np.zeros(160, np.float32))
    settled = [
        front.process(silence, far[i : i + 160]).echo_settled for i in range(0, 3 * RATE, 160)
    ]
    front.close()
    # Once the line shows no echo path (after 2 s of the bot), there is nothing for the
    # canceller to find.
    assert all(settled[-40:])
    assert FrontEnd(echo_cancel=False).process(silence).echo_settled


def test_after_the_schedule_moved_under_the_reference_the_canceller_relearns(
    far: np.ndarray,
) -> None:
    """A reply placed a frame off (its mark echo moved the schedule) leaks ~300 ms of
    echo while AEC3 re-adapts: until that is surely over, the front end says so, and a
    hold needs the unsettled canceller's longer speech."""
    front = FrontEnd()
    echo = echo_of(far, 150)
    settled = []
    for k, i in enumerate(range(0, 6 * RATE, 160)):
        out = front.process(mulaw_encode(echo[i : i + 160]), far[i : i + 160], k == 200)
        settled.append(out.echo_settled)
    front.close()
    assert all(settled[150:200])  # settled after 2 s of the bot...
    assert not any(settled[200:240])  # ...not for 800 ms after the move at 4 s...
    assert all(settled[240:])  # ...and again after it
