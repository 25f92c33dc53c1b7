"""TwilioPlayout: Twilio's outbound buffer as the caller's ear experiences it."""

import numpy as np
import pytest

from media.codec import mulaw_decode, mulaw_encode
from ops.twilio_playout import TwilioPlayout


def _tone(samples: int, amplitude: int = 8000) -> bytes:
    t = np.arange(samples)
    return mulaw_encode((amplitude * np.sin(2 * np.pi * 440 * t / 8000)).astype(np.int16))


def test_plays_fed_audio_in_order_then_silence() -> None:
    playout = TwilioPlayout()
    payload = _tone(200)
    playout.feed_media(payload)

    first, _ = playout.tick(160)
    second, _ = playout.tick(160)

    expected = mulaw_decode(payload)
    np.testing.assert_array_equal(first, expected[:160])
    np.testing.assert_array_equal(second[:40], expected[160:])
    assert not second[40:].any()
    assert playout.buffered_samples == 0
    assert playout.played_samples == 200


def test_mark_is_echoed_only_after_its_audio_has_played() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(320))
    playout.feed_mark("a")
    playout.feed_media(_tone(160))
    playout.feed_mark("b")

    # Ticks 1-2 play "a"'s audio; "a" is due when tick 3 begins, "b" when tick 4 does.
    echoed = [playout.tick(160)[1] for _ in range(5)]

    assert echoed == [[], [], ["a"], ["b"], []]


def test_marks_are_echoed_in_order_when_due_together() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(80))
    for name in ("one", "two", "three"):
        playout.feed_mark(name)

    echoed = [playout.tick(160)[1] for _ in range(2)]

    assert echoed == [[], ["one", "two", "three"]]


def test_mark_with_nothing_buffered_is_due_on_the_next_tick() -> None:
    playout = TwilioPlayout()
    playout.feed_mark("now")

    audio, due = playout.tick(160)

    assert due == ["now"]
    assert not audio.any()


def test_mark_after_played_audio_is_due_at_once() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(160))
    playout.tick(160)
    playout.feed_mark("late")

    assert playout.tick(160)[1] == ["late"]


def test_clear_drops_unplayed_audio_and_returns_pending_marks() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(480))
    playout.feed_mark("x")
    playout.feed_media(_tone(480))
    playout.feed_mark("y")
    playout.tick(160)

    echoed = playout.clear()
    audio, due = playout.tick(160)

    assert echoed == ["x", "y"]
    assert due == []
    assert not audio.any()
    assert playout.buffered_samples == 0
    assert playout.pending_marks == []


def test_marks_after_a_clear_sit_at_the_new_end_of_the_buffer() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(800))
    playout.tick(160)
    playout.clear()
    playout.feed_media(_tone(160))
    playout.feed_mark("after")

    assert [playout.tick(160)[1] for _ in range(2)] == [[], ["after"]]


def test_a_short_gap_inside_an_utterance_is_an_underrun() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(160))
    playout.tick(160)
    playout.tick(160)  # dry: 20 ms hole
    playout.tick(160)  # dry: 40 ms hole
    playout.feed_media(_tone(160))  # the rest arrives late
    playout.tick(160)

    assert playout.underruns == 2
    assert playout.underrun_ms == pytest.approx(40.0)


def test_a_partial_tick_counts_only_its_silent_part() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(100))
    playout.tick(160)  # 100 samples of audio, 60 of silence
    playout.feed_media(_tone(160))

    assert playout.underruns == 1
    assert playout.underrun_ms == pytest.approx(7.5)


def test_audio_arriving_before_the_buffer_runs_dry_is_no_underrun() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(160))
    playout.tick(160)
    playout.feed_media(_tone(160))
    playout.tick(160)

    assert playout.underruns == 0
    assert playout.underrun_ms == 0


def test_a_long_pause_between_utterances_is_no_underrun() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(160))
    playout.tick(160)
    for _ in range(20):  # 400 ms: a pause, not a hole
        playout.tick(160)
    playout.feed_media(_tone(160))

    assert playout.underruns == 0


def test_silence_after_a_clear_is_no_underrun() -> None:
    playout = TwilioPlayout()
    playout.feed_media(_tone(480))
    playout.tick(160)
    playout.clear()
    playout.tick(160)
    playout.feed_media(_tone(160))

    assert playout.underruns == 0


def test_silence_before_the_first_audio_is_no_underrun() -> None:
    playout = TwilioPlayout()
    playout.tick(160)
    playout.feed_media(_tone(160))

    assert playout.underruns == 0


def test_tick_refuses_a_non_positive_size() -> None:
    with pytest.raises(ValueError, match="positive"):
        TwilioPlayout().tick(0)
