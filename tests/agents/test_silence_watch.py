"""A silent caller is asked again once, then said goodbye to; speaking starts over."""

from agents.cascade.silence_watch import SilenceWatch

RATE = 16000


def _quiet(watch: SilenceWatch, at_s: float, *, can_ask: bool = True) -> str | None:
    return watch.check(int(at_s * RATE), timeout_s=8.0, busy=False, speaking=False, can_ask=can_ask)


def test_a_silent_caller_is_asked_again_then_said_goodbye_to() -> None:
    watch = SilenceWatch(RATE)
    assert _quiet(watch, 7.9) is None
    assert _quiet(watch, 8.0) == "ask_again"
    assert _quiet(watch, 15.9) is None
    assert _quiet(watch, 16.0) == "goodbye"


def test_the_silence_counts_from_when_nobody_is_busy() -> None:
    watch = SilenceWatch(RATE)
    watch.check(5 * RATE, timeout_s=8.0, busy=True, speaking=False, can_ask=True)  # the bot
    assert _quiet(watch, 12.9) is None
    assert _quiet(watch, 13.0) == "ask_again"


def test_speaking_again_earns_another_prompt() -> None:
    watch = SilenceWatch(RATE)
    assert _quiet(watch, 8.0) == "ask_again"
    watch.check(9 * RATE, timeout_s=8.0, busy=True, speaking=True, can_ask=True)
    assert _quiet(watch, 17.0) == "ask_again"


def test_without_a_line_to_ask_with_it_says_goodbye() -> None:
    assert _quiet(SilenceWatch(RATE), 8.0, can_ask=False) == "goodbye"


def test_no_timeout_never_fires() -> None:
    watch = SilenceWatch(RATE)
    assert watch.check(RATE * 600, timeout_s=0, busy=False, speaking=False, can_ask=True) is None
