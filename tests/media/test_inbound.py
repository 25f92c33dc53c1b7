from media.codec import MULAW_SILENCE
from media.inbound import InboundAudioClock

FRAME = 160
SILENCE = bytes([MULAW_SILENCE])


def _chunk(marker: int) -> bytes:
    return bytes([marker]) * FRAME


def test_contiguous_chunks_pass_through_unchanged():
    clock = InboundAudioClock()
    out = b"".join(clock.push(20 * i, _chunk(i)) for i in range(5))
    assert out == b"".join(_chunk(i) for i in range(5))
    assert clock.position == 5 * FRAME
    assert clock.gaps_filled_samples == clock.dropped_samples == clock.resyncs == 0


def test_skipped_chunks_become_silence_so_the_clock_keeps_real_time():
    clock = InboundAudioClock()
    clock.push(0, _chunk(1))
    out = clock.push(100, _chunk(2))  # 80 ms (4 frames) were never sent
    assert out == SILENCE * (4 * FRAME) + _chunk(2)
    assert clock.position == 100 * 8 + FRAME
    assert clock.gaps_filled_samples == 4 * FRAME


def test_timestamp_jitter_below_10_ms_is_not_a_gap():
    clock = InboundAudioClock()
    clock.push(0, _chunk(1))
    assert clock.push(27, _chunk(2)) == _chunk(2)  # 7 ms late
    assert clock.push(38, _chunk(3)) == _chunk(3)  # 2 ms early
    assert clock.gaps_filled_samples == 0
    assert clock.dropped_samples == 0
    assert clock.position == 3 * FRAME


def test_duplicate_chunks_are_dropped():
    clock = InboundAudioClock()
    clock.push(0, _chunk(1))
    clock.push(20, _chunk(2))
    assert clock.push(20, _chunk(2)) == b""
    assert clock.dropped_samples == FRAME
    assert clock.position == 2 * FRAME


def test_a_late_chunk_keeps_only_its_unheard_tail():
    clock = InboundAudioClock()
    clock.push(0, _chunk(1))
    clock.push(20, _chunk(2))
    late = bytes(range(FRAME))
    out = clock.push(25, late)  # covers 25-45 ms; 25-40 ms was already emitted
    assert out == late[15 * 8 :]
    assert clock.dropped_samples == 15 * 8
    assert clock.position == 45 * 8


def test_a_long_outage_is_filled_only_up_to_max_gap_then_resynchronised():
    clock = InboundAudioClock(max_gap_ms=2000)
    clock.push(0, _chunk(1))
    out = clock.push(10_020, _chunk(2))  # 10 s of nothing
    assert out == SILENCE * (2000 * 8) + _chunk(2)
    assert clock.resyncs == 1
    # After the resync, timestamps map onto the new position without further gaps.
    assert clock.push(10_040, _chunk(3)) == _chunk(3)
    assert clock.position == FRAME + 2000 * 8 + 2 * FRAME


def test_a_timestamp_jumping_far_back_resynchronises_instead_of_dropping():
    clock = InboundAudioClock(max_gap_ms=2000)
    for i in range(200):
        clock.push(20 * i, _chunk(1))
    assert clock.push(0, _chunk(2)) == _chunk(2)  # stream restarted its timestamps
    assert clock.resyncs == 1
    assert clock.push(20, _chunk(3)) == _chunk(3)


def test_the_line_runs_on_with_wall_time_between_the_frames_we_read() -> None:
    clock = InboundAudioClock()
    clock.started(100.0)
    assert clock.line_position(100.0) == 0
    clock.push(0, _chunk(1), arrived_s=100.02)
    # 50 ms after that frame the caller's side has sent 50 ms more, read or not.
    assert clock.line_position(100.07) == 160 + 400


def test_frames_read_late_do_not_pull_the_line_back() -> None:
    clock = InboundAudioClock()
    clock.started(100.0)
    # A busy loop reads the first 200 ms of frames in one go, 200 ms late.
    for i in range(10):
        clock.push(20 * i, _chunk(1), arrived_s=100.4)
    assert clock.position == 1600
    # The start says the line is at 400 ms, not at the 200 ms read.
    assert clock.line_position(100.4) == 3200


def test_the_line_never_runs_more_than_a_second_ahead_of_what_was_read() -> None:
    clock = InboundAudioClock()
    clock.started(100.0)
    clock.push(0, _chunk(1), arrived_s=100.02)
    assert clock.line_position(130.0) == 160 + 8000  # the sender stopped sending
    assert InboundAudioClock().line_position(5.0) == 0  # never started: what was read


def test_skipped_chunks_are_filled_whole_whatever_the_timestamps_wobble() -> None:
    clock = InboundAudioClock()
    clock.push(0, _chunk(1))
    out = clock.push(103, _chunk(2))  # four 20 ms chunks skipped, stamped 3 ms late
    assert out == SILENCE * (4 * FRAME) + _chunk(2)
    assert clock.position % FRAME == 0
