"""What a caller's side may send per call: media pace and keypad presses, on the wall clock."""

from app.limits import DIGIT_BURST, MAX_DIGITS_PER_TURN, KeypadLimit, MediaPace


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_real_time_media_is_never_a_flood() -> None:
    clock = Clock()
    pace = MediaPace(1.5, clock=clock)
    for frame in range(1, 3001):  # a minute of 20 ms frames, on time
        clock.now = frame * 0.02
        assert not pace.flooding(frame * 160)


def test_a_two_second_burst_is_allowed_and_faster_than_the_rate_is_not() -> None:
    clock = Clock()
    pace = MediaPace(1.5, clock=clock)
    assert not pace.flooding(2 * 8000)  # a 2 s backlog delivered at once
    clock.now = 10.0
    assert not pace.flooding(int(16.9 * 8000))  # 1.5 x 10 s + 2 s
    assert pace.flooding(int(17.1 * 8000))


def test_keypad_bursts_are_cut_and_refilled_over_time() -> None:
    clock = Clock()
    keys = KeypadLimit(clock=clock)
    burst = [keys.allow() for _ in range(DIGIT_BURST + 5)]
    assert burst.count(True) == DIGIT_BURST

    clock.now += 1.0  # 8 more tokens a second; also a new keypad turn
    assert [keys.allow() for _ in range(10)].count(True) == 8


def test_one_keypad_turn_is_capped_until_the_keys_pause() -> None:
    clock = Clock()
    keys = KeypadLimit(clock=clock)
    allowed = 0
    for _ in range(60):  # 5 keys a second, never a 0.8 s pause
        clock.now += 0.2
        allowed += keys.allow()
    assert allowed == MAX_DIGITS_PER_TURN

    clock.now += 1.0
    assert keys.allow(), "after a pause, a new keypad turn begins"
