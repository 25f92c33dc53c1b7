from collections.abc import Callable

import numpy as np
import pytest

from media.playout import Heard, PlayoutClock

SECOND = 8000


def _send(clock: PlayoutClock, samples: int, text: str, now: int, turn_id: int = 1) -> str:
    name = clock.new_mark_name()
    clock.sent(name, samples, text, turn_id, now)
    return name


def test_mark_names_are_unique_per_clock():
    clock = PlayoutClock()
    names = {clock.new_mark_name() for _ in range(100)}
    assert len(names) == 100


def test_chunks_sent_faster_than_real_time_queue_back_to_back():
    clock = PlayoutClock()
    _send(clock, SECOND, "one", now=0)
    _send(clock, SECOND, "two", now=10)
    _send(clock, SECOND, "three", now=20)
    assert clock.pending_samples(0) == 3 * SECOND
    assert clock.pending_samples(SECOND // 2) == 2 * SECOND + SECOND // 2
    assert clock.pending_samples(3 * SECOND) == 0


def test_a_chunk_sent_after_the_queue_drained_starts_when_sent():
    clock = PlayoutClock()
    first = _send(clock, SECOND, "one", now=0)
    clock.echoed(first, now=SECOND)
    _send(clock, SECOND, "two", now=5 * SECOND)
    assert clock.pending_samples(5 * SECOND) == SECOND
    assert clock.audible(6 * SECOND - 1)
    assert not clock.audible(6 * SECOND + 200)


def test_an_echo_counts_its_chunk_as_played_and_reanchors_the_rest():
    clock = PlayoutClock()
    first = _send(clock, SECOND, "Hello there.", now=0)
    _send(clock, SECOND, "How can I help?", now=0)
    # Playback started late: the first mark comes back 0.25 s after the schedule said.
    record = clock.echoed(first, now=SECOND + 2000)
    assert record is not None and record.text == "Hello there."
    assert clock.turn_heard(1) == "Hello there."
    assert clock.pending_samples(SECOND + 2000) == SECOND
    assert clock.audible(2 * SECOND + 1000)  # the old schedule would have ended at 2 s


def test_an_echo_implies_every_earlier_chunk_played():
    clock = PlayoutClock()
    _send(clock, 800, "one", now=0)
    second = _send(clock, 800, "two", now=0)
    clock.echoed(second, now=1600)
    assert clock.turn_heard(1) == "one two"
    assert clock.pending_samples(1600) == 0


def test_unknown_marks_are_ignored():
    clock = PlayoutClock()
    _send(clock, 800, "one", now=0)
    assert clock.echoed("not-ours", now=100) is None
    assert clock.pending_samples(0) == 800


def test_clear_mid_chunk_reports_the_words_heard_up_to_a_word_boundary():
    clock = PlayoutClock()
    first = _send(clock, SECOND, "Your table is booked", now=0)
    _send(clock, 2 * SECOND, "for seven people at eight tonight.", now=0)
    clock.echoed(first, now=SECOND)
    # Half of the second chunk has played: 17 of its 34 characters, mid-"at".
    heard = clock.cleared(now=2 * SECOND)
    assert heard == [
        Heard(
            turn_id=1,
            text="Your table is booked for seven people",
            played_samples=2 * SECOND,
            truncated=True,
        )
    ]
    assert clock.turn_heard(1) == "Your table is booked for seven people"


def test_clear_before_a_chunk_starts_playing_hears_none_of_it():
    clock = PlayoutClock()
    _send(clock, SECOND, "First sentence.", now=0)
    _send(clock, SECOND, "Second sentence.", now=0)
    (heard,) = clock.cleared(now=SECOND)  # by the schedule, the first just finished
    assert heard.text == "First sentence."
    assert heard.played_samples == SECOND
    assert heard.truncated


def test_clear_reports_each_turn_it_cut():
    clock = PlayoutClock()
    _send(clock, SECOND, "Old answer.", now=0, turn_id=3)
    _send(clock, SECOND, "New answer.", now=0, turn_id=4)
    heard = clock.cleared(now=SECOND // 2)
    assert [h.turn_id for h in heard] == [3, 4]
    assert heard[1] == Heard(turn_id=4, text="", played_samples=0, truncated=True)


def test_marks_echoed_after_a_clear_do_not_count_as_played():
    clock = PlayoutClock()
    first = _send(clock, SECOND, "One two three four.", now=0)
    second = _send(clock, SECOND, "Five six seven eight.", now=0)
    clock.cleared(now=SECOND // 2)
    assert clock.echoed(first, now=SECOND // 2 + 80) is None
    assert clock.echoed(second, now=SECOND // 2 + 80) is None
    assert clock.turn_heard(1) == "One two"
    assert not clock.audible(SECOND // 2 + 80)


def test_clear_with_nothing_pending_reports_nothing():
    clock = PlayoutClock()
    first = _send(clock, 800, "Done.", now=0)
    clock.echoed(first, now=800)
    assert clock.cleared(now=1000) == []


def test_audible_follows_the_schedule_and_the_marks():
    clock = PlayoutClock()
    assert not clock.audible(0)
    first = _send(clock, SECOND, "one", now=0)
    assert clock.audible(0)
    assert clock.audible(SECOND + 100)  # within one frame of slack
    # The mark is late and the schedule long over: assume it stopped.
    assert not clock.audible(SECOND + 161)
    clock.echoed(first, now=SECOND + 400)
    assert not clock.audible(SECOND + 400)


def test_reference_level_measures_the_audio_expected_to_be_playing():
    clock = PlayoutClock()
    t = np.arange(SECOND) / SECOND
    tone = (0.5 * np.sin(2 * np.pi * 400 * t)).astype(np.float32)  # RMS = -9.03 dBFS
    name = clock.new_mark_name()
    clock.sent(name, SECOND, "hello", 1, now=0, pcm=tone)
    assert clock.reference_level_db(0) == -120.0
    assert clock.reference_level_db(SECOND // 2, window=1600) == pytest.approx(-9.03, abs=0.1)
    # Half the window overlaps the tone: 3 dB less energy.
    assert clock.reference_level_db(800, window=1600) == pytest.approx(-12.04, abs=0.1)
    clock.echoed(name, now=SECOND)
    # Just-played audio is still remembered for echo checks, then forgotten.
    assert clock.reference_level_db(SECOND, window=1600) == pytest.approx(-9.03, abs=0.1)
    assert clock.reference_level_db(3 * SECOND) == -120.0


def test_int16_pcm_is_scaled_and_must_match_the_chunk_length():
    clock = PlayoutClock()
    full_scale = np.full(1600, 16384, dtype=np.int16)
    clock.sent(clock.new_mark_name(), 1600, "x", 1, now=0, pcm=full_scale)
    assert clock.reference_level_db(1600) == pytest.approx(-6.02, abs=0.05)
    with pytest.raises(ValueError):
        clock.sent(clock.new_mark_name(), 1600, "y", 1, now=0, pcm=full_scale[:100])


def test_reusing_a_pending_mark_name_is_an_error():
    clock = PlayoutClock()
    clock.sent("a", 160, "x", 1, now=0)
    with pytest.raises(ValueError):
        clock.sent("a", 160, "y", 1, now=0)


def test_audio_sent_to_an_idle_line_starts_after_the_network_latency():
    clock = PlayoutClock(min_latency=480)
    name = _send(clock, 800, "hello", now=1000)
    assert clock.pending_samples(1000) == 800
    assert not clock.render(1000, 1480).any()  # nothing plays yet
    assert clock.echoed(name, 2280) is not None  # 1480 + 800


def test_the_first_chunks_echo_teaches_the_clock_the_real_latency():
    clock = PlayoutClock(min_latency=480, learn_latency=True)
    first = _send(clock, 800, "hello", now=0)
    _send(clock, 800, "there", now=0)  # queued behind: says nothing about latency
    clock.echoed(first, 80 + 800)  # it really started 80 samples after it was sent
    assert clock.min_latency == (480 + 80) // 2
    # An utterance sent later starts where the line now says it will.
    clock.echoed(clock.new_mark_name(), 5000)  # unknown names change nothing
    assert clock.min_latency == 280


def test_the_learnt_latency_stays_within_bounds():
    clock = PlayoutClock(min_latency=480, learn_latency=True)
    for t in range(10):
        name = _send(clock, 80, "x", now=t * 10_000)
        clock.echoed(name, t * 10_000 + 80)  # played at once: zero latency
    assert clock.min_latency == 8000 // 50  # 20 ms, the floor


def test_render_puts_the_schedule_on_the_call_clock():
    clock = PlayoutClock()
    clock.sent("m1", 4, "a", 1, now=10, pcm=np.array([1, 2, 3, 4], np.int16))
    out = clock.render(8, 16)
    np.testing.assert_allclose(out * 32768, [0, 0, 1, 2, 3, 4, 0, 0])


def test_an_echo_within_a_frame_of_the_schedule_leaves_it_where_it_was():
    clock = PlayoutClock(min_latency=160)
    pcm = np.ones(700, np.int16)
    first = clock.new_mark_name()
    clock.sent(first, 700, "one", 1, now=0, pcm=pcm)
    clock.sent(clock.new_mark_name(), 700, "two", 1, now=0, pcm=pcm)
    # Scheduled to end at 860; its mark comes back with the next caller frame, at 960.
    clock.echoed(first, now=960)
    # Moving the audio by those 100 samples would move the echo reference with it.
    assert clock.render(1555, 1565).tolist() == [1 / 32768] * 5 + [0.0] * 5
    assert clock.pending_samples(860) == 700
    assert clock.moves == 0


def test_an_echo_that_contradicts_the_schedule_moves_it():
    clock = PlayoutClock(min_latency=160)
    first = _send(clock, 700, "one", now=0)
    _send(clock, 700, "two", now=0)
    clock.echoed(first, now=1500)  # over a frame later than the schedule's 860
    assert clock.pending_samples(1500) == 700
    assert clock.moves == 1  # the echo reference read for it was in the wrong place
    clock2 = PlayoutClock(min_latency=160)
    early = _send(clock2, 700, "one", now=0)
    _send(clock2, 700, "two", now=0)
    clock2.echoed(early, now=700)  # before the schedule said it could have ended
    assert clock2.pending_samples(700) == 700


def test_the_echo_reference_is_read_a_constant_lead_ahead_whatever_is_learnt():
    clock = PlayoutClock(min_latency=480, learn_latency=True)
    lead = clock.reference_lead
    name = _send(clock, 800, "hello", now=0)
    clock.echoed(name, 2000)  # a slow first start: the learnt latency grows
    assert clock.min_latency > 480
    assert clock.reference_lead == lead == 160  # 20 ms, the latency's floor
    assert PlayoutClock(min_latency=240).reference_lead == 240  # nothing learnt: as set


def _line_start(sent: int, network: int) -> int:
    """Where a line that plays 20 ms frames starts audio sent at `sent`: the first frame
    boundary after it arrives `network` samples later (Twilio, and ops/simulate.py)."""
    return (sent + network) // 160 * 160 + 160


def _replies_on_a_framed_line(
    clock: PlayoutClock, network: Callable[[int], int], *, seed: int, judged_from: int
) -> int:
    """24 replies, each sent at a random moment within a caller frame to a line whose
    latency is network(k) for the k-th; how many from `judged_from` on the schedule
    placed where the line played them, to the sample."""
    pcm = np.ones(800, np.int16)
    rng = np.random.default_rng(seed)
    exact = 0
    for k in range(24):
        sent = 8000 * (k + 1) + int(rng.integers(0, 160))
        truth = _line_start(sent, network(k))
        name = clock.new_mark_name()
        clock.sent(name, 800, "hello", k, now=sent, pcm=pcm)
        if k >= judged_from:
            exact += clock.render(truth - 1, truth + 1).tolist() == [0.0, 1 / 32768]
        clock.echoed(name, now=truth + 800)
    return exact


@pytest.mark.parametrize("network", [0, 55, 160, 400, 1100])
def test_on_a_framed_line_fresh_audio_is_scheduled_where_it_starts(network: int):
    clock = PlayoutClock(min_latency=480, learn_latency=True, frame=160)
    # Once a dozen starts have shown the line, the schedule puts nearly every reply
    # where the line plays it, so the echo reference of its first words is where their
    # echo is (each start only pins the latency to a frame's width: a reply sent within
    # a few samples of a boundary may still be placed a frame off).
    exact = _replies_on_a_framed_line(clock, lambda k: network, seed=network, judged_from=12)
    assert exact >= 10
    assert clock.reference_lead == 160


def test_on_a_framed_line_the_learnt_latency_follows_a_line_that_slows():
    clock = PlayoutClock(min_latency=0, learn_latency=True, frame=160)
    # 50 ms slower from the 9th reply on.
    exact = _replies_on_a_framed_line(clock, lambda k: 0 if k < 8 else 400, seed=3, judged_from=16)
    assert exact >= 6
