"""Every transition the turn engine allows is one a call takes: each is reached here by
a scripted call, and the table allows nothing else."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from agents.turns.config import TurnTaking
from agents.turns.engine import (
    _ALLOWED,
    Evaluate,
    Frame,
    Hearing,
    IllegalTransition,
    TurnEngine,
)
from agents.turns.protocol import TurnState
from media.vad import SpeechStarted, SpeechStopped
from tests.agents.turn_script import Bot, Hears, Quiet, Say, run

LISTENING, CALLER, ANSWERING, REPLYING, BOT, OVERLAP, HELD, RESUMING = (
    TurnState.LISTENING,
    TurnState.CALLER,
    TurnState.ANSWERING,
    TurnState.REPLYING,
    TurnState.BOT,
    TurnState.OVERLAP,
    TurnState.HELD,
    TurnState.RESUMING,
)
Move = tuple[TurnState, TurnState]


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Move]]:
    """The transitions every engine takes during the test, in order."""
    taken: list[Move] = []
    to = TurnEngine._to

    def recording(self: TurnEngine, state: TurnState) -> None:
        taken.append((self.state, state))
        to(self, state)

    monkeypatch.setattr(TurnEngine, "_to", recording)
    yield taken


@dataclass(frozen=True)
class Path:
    move: Move
    why: str
    call: Callable[[], object]


QUESTION = [Hears(99_000, "What time do you open tomorrow?", probability=0.9)]
UNCLEAR = [Hears(99_000, "", hearing=Hearing.UNCLEAR)]
# Caller speech over the bot starts 1 s into a 4 s reply to the first question.
ASKED_THEN_OVER = [Say(1500), Quiet(1600), Say(400), Quiet(3000)]
# ...and it is a hum: the held bot is let go on.
HUM = [Hears(3200, "What time do you open tomorrow?", 0.9), Hears(99_000, "Mhm.", 0.5)]


def _held_words_unjudged() -> None:
    """Words that held the bot could not be transcribed (the evaluation failed): the
    bot goes on."""
    engine = TurnEngine(TurnTaking())
    engine.reply_started()
    engine.reply_audible()
    settled = dict(samples=320, noise_floor_db=-60.0, echo_settled=True, bot_audible=True,
                   bot_level_db=-18.0)  # fmt: skip
    for i in range(1, 6):
        engine.frame(Frame(end=i * 320, events=[], level_db=-60.0, **settled))
    engine.frame(Frame(end=6 * 320, events=[SpeechStarted(5 * 320)], level_db=-20.0, **settled))
    for i in range(7, 12):
        engine.frame(Frame(end=i * 320, events=[], level_db=-20.0, **settled))
    assert engine.state is HELD
    asked = engine.frame(
        Frame(end=12 * 320, events=[SpeechStopped(11 * 320)], level_db=-60.0, **settled)
    )
    assert asked and isinstance(asked[0], Evaluate)
    engine.failed(asked[0].end)


def _reset_during_overlap() -> None:
    """Keys pressed while speaking over the greeting: the keypad answers, the
    utterance is forgotten."""
    engine = TurnEngine(TurnTaking())
    engine.reply_started()
    engine.reply_audible()
    silent = dict(samples=320, noise_floor_db=-60.0, echo_settled=True)
    for i in range(1, 6):
        engine.frame(Frame(end=i * 320, events=[], level_db=-60.0, bot_audible=True,
                           bot_level_db=-18.0, **silent))  # fmt: skip
    engine.frame(Frame(end=6 * 320, events=[SpeechStarted(5 * 320)], level_db=-50.0,
                       bot_audible=True, bot_level_db=-18.0, **silent))  # fmt: skip
    assert engine.state is OVERLAP
    engine.caller_reset()


PATHS = [
    Path((LISTENING, CALLER), "the caller starts speaking", lambda: run([Say(600)], QUESTION)),
    Path(
        (CALLER, ANSWERING), "a finished question is answered", lambda: run([Say(1500)], QUESTION)
    ),
    Path(
        (CALLER, REPLYING),
        "speech with no clear words is asked about again",
        lambda: run([Say(1500)], UNCLEAR),
    ),
    Path(
        (LISTENING, REPLYING),
        "the bot greets the caller",
        lambda: run([Quiet(500)], QUESTION, bot=Bot(greeting_ms=2000)),
    ),
    Path(
        (CALLER, LISTENING),
        "a noise that held no speech is let go",
        lambda: run([Say(300)], [Hears(99_000, "", hearing=Hearing.NOTHING)]),
    ),
    Path(
        (ANSWERING, BOT),
        "the answer's audio reaches the caller",
        lambda: run([Say(1500)], QUESTION),
    ),
    Path(
        (ANSWERING, CALLER),
        "the caller goes on before the answer is heard",
        lambda: run([Say(1500), Quiet(500), Say(800)], QUESTION, bot=Bot(latency_ms=1500)),
    ),
    Path(
        (ANSWERING, LISTENING),
        "the answer fails with nothing said",
        lambda: run([Say(1500)], QUESTION, bot=Bot(reply_ms=0)),
    ),
    Path(
        (REPLYING, BOT),
        "the greeting reaches the caller",
        lambda: run([Quiet(500)], QUESTION, bot=Bot(greeting_ms=2000)),
    ),
    Path(
        (REPLYING, CALLER),
        "the caller speaks again before being asked again",
        lambda: run([Say(1500), Quiet(1200), Say(800)], UNCLEAR, bot=Bot(latency_ms=1500)),
    ),
    Path(
        (REPLYING, LISTENING),
        "asking again fails with nothing said",
        lambda: run([Say(1500)], UNCLEAR, bot=Bot(reply_ms=0)),
    ),
    Path(
        (BOT, LISTENING),
        "the answer plays out",
        lambda: run([Say(1500)], QUESTION, tail_ms=6000),
    ),
    Path((BOT, OVERLAP), "the caller speaks over the bot", lambda: run(ASKED_THEN_OVER, QUESTION)),
    Path(
        (OVERLAP, BOT),
        "a sound over the bot never loud like a caller is let go",
        lambda: run([Say(1500), Quiet(1600), Say(400, level_db=-58.0), Quiet(3000)], QUESTION),
    ),
    Path(
        (OVERLAP, HELD),
        "a caller loud over the bot holds it",
        lambda: run(ASKED_THEN_OVER, QUESTION),
    ),
    Path(
        (OVERLAP, CALLER),
        "the bot's reply ends while the caller, not yet sure to be one, speaks over it",
        lambda: run(
            [Say(1500), Quiet(1600), Say(1200), Quiet(3000)],
            QUESTION,
            bot=Bot(reply_ms=1500),
            echo_settled=False,
        ),
    ),
    Path((OVERLAP, LISTENING), "keys pressed while speaking over the bot", _reset_during_overlap),
    Path((HELD, RESUMING), "a hum over the bot lets it go on", lambda: run(ASKED_THEN_OVER, HUM)),
    Path(
        (RESUMING, BOT),
        "the caller stays quiet after the hum: the bot goes on",
        lambda: run(ASKED_THEN_OVER, HUM),
    ),
    Path(
        (RESUMING, HELD),
        "the caller goes on after the hum's pause, loud: the bot stays held",
        lambda: run([Say(1500), Quiet(1600), Say(400), Quiet(300), Say(300), Quiet(3000)], HUM),
    ),
    Path(
        (RESUMING, CALLER),
        "the caller talks on quietly before the bot resumes: the length interrupts",
        lambda: run(
            [Say(1500), Quiet(1600), Say(400), Quiet(300), Say(1200, level_db=-55.0)],
            HUM,
            config=TurnTaking(resume_min_silence_ms=1000),
        ),
    ),
    Path((HELD, BOT), "the held words could not be transcribed", _held_words_unjudged),
    Path(
        (HELD, CALLER),
        "a caller who keeps talking over the bot takes the turn",
        lambda: run([Say(1500), Quiet(1600), Say(2500), Quiet(3000)], QUESTION),
    ),
]


@pytest.mark.parametrize(
    "path", PATHS, ids=[f"{p.move[0].value}->{p.move[1].value}" for p in PATHS]
)
def test_each_allowed_transition_is_taken_by_a_call(path: Path, moves: list[Move]) -> None:
    path.call()
    assert path.move in moves, f"{path.why}: took {[(a.value, b.value) for a, b in moves]}"


def test_the_table_allows_exactly_the_transitions_calls_take() -> None:
    allowed = {(a, b) for a, targets in _ALLOWED.items() for b in targets}
    assert allowed == {p.move for p in PATHS}


def test_a_transition_outside_the_table_is_an_error() -> None:
    engine = TurnEngine(TurnTaking())
    with pytest.raises(IllegalTransition):
        engine._to(TurnState.BOT)  # nobody answered: the bot has no turn to take
