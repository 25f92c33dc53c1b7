"""Whether a caller's line carries the bot's echo, judged over the bot's first 2 s.

Only a line that follows the bot's audio has an echo path to cancel. A loud line
that does not (background talk, a caller talking over the greeting on a handset) is
heard as it is: run through the canceller, the caller is held down while the bot talks.
The echo here goes through a speakerphone-like path: band-limited, with a room's
reverberant tail, mu-law quantised like everything on the line.
"""

from __future__ import annotations

import numpy as np
import pytest

from media.codec import mulaw_decode, mulaw_encode
from media.echo_path import EchoPathTest, correlation
from media.frontend import FrontEnd, level_dbfs
from ops.caller_voice import speak
from ops.line import babble
from tests.media.helpers import BOT_LINE

RATE = 8000
CALLER_TEXT = "Hi, sorry, I need to change my booking for tomorrow night please."


@pytest.fixture(scope="module")
def bot() -> np.ndarray:
    return speak(BOT_LINE).astype(np.float32) / 32768


@pytest.fixture(scope="module")
def background(bot: np.ndarray) -> np.ndarray:
    """Background talk 25 dB under the bot's level: bench turns' babble line measures so."""
    level = 10 ** ((level_dbfs(bot) - 25) / 20)
    return babble(bot.size / RATE, np.random.default_rng(5)) * np.float32(level)


def room_echo(far: np.ndarray, delay_ms: int, level_db: float, rt60_ms: int = 300) -> np.ndarray:
    """`far` as a speakerphone returns it: a small speaker's band (400-3300 Hz), a room's
    exponentially decaying tail, `delay_ms` late and `level_db` under `far`."""
    rng = np.random.default_rng(delay_ms)
    tail = RATE * rt60_ms // 1000
    response = rng.standard_normal(tail) * np.exp(-6.9 * np.arange(tail) / tail) * 0.3
    response[0] = 1.0
    response = np.concatenate((np.zeros(RATE * delay_ms // 1000), response))
    size = 1 << int(np.ceil(np.log2(2 * response.size)))
    spectrum = np.fft.rfft(response, size)
    hz = np.fft.rfftfreq(size, 1 / RATE)
    spectrum[(hz < 400) | (hz > 3300)] *= 0.05
    response = np.fft.irfft(spectrum, size)
    echo = np.convolve(far, response)[: far.size]
    return (echo * 10 ** ((level_dbfs(far) + level_db - level_dbfs(echo)) / 20)).astype(np.float32)


def run(line: np.ndarray, far: np.ndarray) -> tuple[FrontEnd, list]:
    """The front end over `line` while `far` plays (the reference read 20 ms ahead, as a
    call reads it)."""
    front = FrontEnd()
    ahead = np.concatenate((far[160:], np.zeros(160, np.float32)))
    outputs = [
        front.process(mulaw_encode(line[i : i + 160]), ahead[i : i + 160])
        for i in range(0, line.size - 159, 160)
    ]
    front.close()
    return front, outputs


def held_down_db(outputs: list, line: np.ndarray, from_s: float, to_s: float) -> float:
    """How far under the line (as mu-law carried it) the front end measured the caller's
    side, typically, over [from_s, to_s): ~0 when the line is heard as it is."""
    lo, hi = int(from_s * 50), int(to_s * 50)
    carried = mulaw_decode(mulaw_encode(line)).astype(np.float32) / 32768
    sent = [level_dbfs(carried[i * 160 : i * 160 + 160]) for i in range(lo, hi)]
    return float(np.median(np.array(sent) - [o.level_db for o in outputs[lo:hi]]))


def test_background_talk_as_loud_as_an_echo_is_no_echo_path(bot, background) -> None:
    _, outputs = run(background, bot)
    # Judged after the bot's first 2 s: nothing to cancel, so nothing for the canceller
    # to learn, and the line is heard as it is.
    assert outputs[int(2.2 * 50)].echo_settled
    assert held_down_db(outputs, background, 2.2, 4.0) < 1.0


def test_a_caller_talking_over_the_greeting_on_a_handset_is_no_echo_path(bot) -> None:
    caller = speak(CALLER_TEXT).astype(np.float32) / 32768
    line = np.zeros_like(bot)
    line[2000 : 2000 + caller.size] = caller[: bot.size - 2000]
    _, outputs = run(line, bot)
    assert outputs[int(2.2 * 50)].echo_settled


@pytest.mark.parametrize("level_db", [-10, -20, -30])
@pytest.mark.parametrize("delay_ms", [60, 250])
def test_a_speakerphone_under_background_talk_is_an_echo_path(
    bot, background, level_db: int, delay_ms: int
) -> None:
    line = background + room_echo(bot, delay_ms, level_db)
    _, outputs = run(line, bot)
    # Still learning the echo path until 2 s of the bot, then taking the echo out of
    # the line (at -30 dB it is 5 dB under the babble: the line drops ~3 dB).
    assert not outputs[int(1.9 * 50)].echo_settled
    assert held_down_db(outputs, line, 2.2, 4.0) > 1.5


def test_a_speakerphone_whose_caller_talks_over_the_greeting_is_found_later(bot) -> None:
    # The caller's loud words over the bot's first 2 s hide its echo from the first
    # judgement; the next 2 s of the bot show it.
    caller = speak(CALLER_TEXT).astype(np.float32) / 32768
    echo = room_echo(bot, 150, -20)
    line = echo.copy()
    line[800 : 800 + caller.size] += caller[: line.size - 800] * np.float32(2.0)
    _, outputs = run(line, bot)
    assert held_down_db(outputs, line, 7.0, bot.size / RATE) > 1.5


def test_over_background_talk_a_caller_interrupting_the_bot_is_heard_at_full_level(
    bot, background
) -> None:
    caller = speak(CALLER_TEXT).astype(np.float32) / 32768
    line = background.copy()
    at = 2 * RATE  # the caller cuts in 2 s into the bot's reply
    span = min(caller.size, line.size - at)
    line[at : at + span] += caller[:span]
    _, outputs = run(line, bot)
    heard = np.array([o.level_db for o in outputs[at // 160 + 5 : (at + span) // 160]])
    sent = np.array(
        [
            level_dbfs(mulaw_decode(mulaw_encode(line[i : i + 160])).astype(np.float32) / 32768)
            for i in range(at + 800, at + span - 159, 160)
        ]
    )[: heard.size]
    # The front end measures the caller as the line carries them: nothing held down.
    assert np.median(sent - heard) < 1.0


def test_correlation_finds_a_delayed_copy_and_not_unrelated_speech(bot, background) -> None:
    late = np.concatenate((np.zeros(1200, np.float32), bot[:-1200]))
    assert correlation(late[: 2 * RATE], bot[: 2 * RATE]) > 0.9
    assert correlation(background[: 2 * RATE], bot[: 2 * RATE]) < 0.06


def test_a_no_echo_line_is_not_taken_for_an_echo_path_on_one_window_that_follows_the_bot(
    bot, background
) -> None:
    # Over a long call unrelated talk now and then follows the bot for one 2 s window;
    # an echo follows it in every window.
    judge = EchoPathTest()
    window = 2 * RATE
    late = np.concatenate((np.zeros(1200, np.float32), bot[:-1200])) * np.float32(0.3)
    verdicts = []
    for line in (background, late, background, late, late):
        for i in range(0, window, 160):
            verdicts.append(judge.feed(line[i : i + 160], bot[i : i + 160], -20.0))
    per_window = verdicts[window // 160 - 1 :: window // 160]
    assert per_window == [False, False, False, False, True]
