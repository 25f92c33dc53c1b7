"""CallerScript and BotEar: when the simulated caller speaks, on the sample clock."""

import numpy as np
import pytest

from ops.simulate import (
    BotEar,
    CallerScript,
    CallerTurn,
    PreparedTurn,
    SimulationError,
    connect_uri,
    parse_twiml,
)

FRAME = 160
VOICE = np.full(FRAME, 3000, dtype=np.int16)
QUIET = np.zeros(FRAME, dtype=np.int16)


def _ms(ms: float) -> int:
    return round(ms * 8)


def _turn(turn: CallerTurn, seconds: float = 0.5) -> PreparedTurn:
    return PreparedTurn(turn=turn, audio=np.full(_ms(seconds * 1000), 1000, dtype=np.int16))


def _run(script: CallerScript, bot: list[bool], ticks: int) -> tuple[BotEar, list[int]]:
    """Drive the script tick by tick as the simulator does; bot[i] = frame i voiced."""
    ear = BotEar()
    starts = []
    for tick in range(ticks):
        now = tick * FRAME
        script.advance(now, ear)
        if script.mic(now, FRAME).any() and not script.mic(now - FRAME, FRAME).any():
            starts.append(now)
        ear.hear(VOICE if tick < len(bot) and bot[tick] else QUIET, now)
    return ear, starts


def test_polite_turn_waits_for_700_ms_of_bot_silence() -> None:
    script = CallerScript([_turn(CallerTurn(text="hi", delay_ms=600))], patience_ms=10_000)
    greeting = [True] * 50  # 1 s of bot speech from 0 ms

    _, starts = _run(script, greeting, 150)

    # Noticing the bot stopped takes 700 ms, longer than the 600 ms delay.
    assert starts == [_ms(1700)]


def test_polite_turn_with_a_long_delay_counts_from_the_bot_stopping() -> None:
    script = CallerScript([_turn(CallerTurn(text="hi", delay_ms=1000))], patience_ms=10_000)

    _, starts = _run(script, [True] * 50, 150)

    assert starts == [_ms(2000)]


def test_pauses_shorter_than_700_ms_do_not_end_the_bot_turn() -> None:
    script = CallerScript([_turn(CallerTurn(text="hi", delay_ms=0))], patience_ms=10_000)
    bot = [True] * 10 + [False] * 30 + [True] * 10  # 600 ms pause mid-answer

    _, starts = _run(script, bot, 150)

    assert starts == [_ms(1000 + 700)]


def test_barge_in_starts_after_the_bots_next_utterance_begins() -> None:
    script = CallerScript(
        [_turn(CallerTurn(text="wait", after="bot_speaking", delay_ms=800))], patience_ms=10_000
    )
    bot = [False] * 25 + [True] * 100  # bot starts at 500 ms, talks for 2 s

    _, starts = _run(script, bot, 150)

    assert starts == [_ms(1300)]


def test_start_turn_follows_the_previous_turn_regardless_of_the_bot() -> None:
    first = _turn(CallerTurn(text="one", after="start", delay_ms=100), seconds=0.5)
    second = _turn(CallerTurn(text="two", after="start", delay_ms=200), seconds=0.5)
    script = CallerScript([first, second], patience_ms=10_000)

    _, starts = _run(script, [True] * 150, 150)

    assert starts == [_ms(100), _ms(100 + 500 + 200)]
    assert script.finished
    assert script.spans == [(_ms(100), _ms(600), "one"), (_ms(800), _ms(1300), "two")]


def test_a_caller_runs_out_of_patience_with_a_silent_bot() -> None:
    script = CallerScript([_turn(CallerTurn(text="hello?"))], patience_ms=1000)

    _, starts = _run(script, [], 100)

    assert starts == [_ms(1000)]


def test_dtmf_digits_are_spaced_and_end_the_turn() -> None:
    script = CallerScript(
        [PreparedTurn(CallerTurn(dtmf="12#", after="start", delay_ms=0), np.zeros(0, np.int16))],
        patience_ms=10_000,
    )
    ear = BotEar()
    sent: list[tuple[int, str]] = []
    for tick in range(60):
        now = tick * FRAME
        script.advance(now, ear)
        sent += [(now, digit) for digit in script.due_digits(now)]

    assert sent == [(0, "1"), (_ms(200), "2"), (_ms(400), "#")]
    assert script.finished


def test_ear_merges_gaps_under_300_ms_into_one_utterance() -> None:
    ear = BotEar()
    pattern = [True] * 10 + [False] * 10 + [True] * 5 + [False] * 20 + [True] * 5
    for tick, voiced in enumerate(pattern):
        ear.hear(VOICE if voiced else QUIET, tick * FRAME)

    assert ear.utterances == [[0, _ms(500)], [_ms(900), _ms(1000)]]


def test_a_turn_needs_exactly_one_source() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        CallerTurn(text="a", dtmf="1")
    with pytest.raises(ValueError, match="exactly one"):
        CallerTurn()
    with pytest.raises(ValueError):
        CallerTurn(text="a", after="whenever")


def test_parse_twiml_reads_the_stream_and_its_parameters() -> None:
    target = parse_twiml(
        '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
        '<Stream url="wss://bot.example/twilio/stream">'
        '<Parameter name="token" value="abc"/><Parameter name="lang" value="en"/>'
        "</Stream></Connect></Response>"
    )

    assert target.url == "wss://bot.example/twilio/stream"
    assert target.parameters == {"token": "abc", "lang": "en"}


def test_parse_twiml_explains_a_receive_only_stream() -> None:
    with pytest.raises(SimulationError, match="receive-only"):
        parse_twiml('<Response><Start><Stream url="wss://x/s"/></Start></Response>')


def test_connect_uri_keeps_the_path_on_an_override_host() -> None:
    assert (
        connect_uri("wss://abc.ngrok.app/twilio/stream", "https://abc.ngrok.app", "127.0.0.1:8080")
        == "ws://127.0.0.1:8080/twilio/stream"
    )
    assert (
        connect_uri("wss://127.0.0.1:8080/s", "http://127.0.0.1:8080", None)
        == "ws://127.0.0.1:8080/s"
    )
    assert connect_uri("wss://a.example/s", "https://a.example", None) == "wss://a.example/s"
