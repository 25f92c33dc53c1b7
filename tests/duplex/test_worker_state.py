"""The worker state machine: legal transitions pass, illegal ones name from and to."""

from __future__ import annotations

import pytest

from agents.duplex.worker import IllegalTransition, WorkerState, WorkerStateMachine

S = WorkerState


@pytest.mark.parametrize(
    "path",
    [
        [S.IDLE, S.DUPLEX_ACTIVE, S.IDLE],
        [S.IDLE, S.DUPLEX_ACTIVE, S.DUPLEX_PAUSED, S.DUPLEX_ACTIVE, S.IDLE],
        [S.IDLE, S.DUPLEX_ACTIVE, S.DUPLEX_PAUSED, S.IDLE],
        [S.ERROR],
    ],
)
def test_legal_paths(path: list[WorkerState]) -> None:
    machine = WorkerStateMachine()
    assert machine.state is S.LOADING
    for state in path:
        machine.to(state)
    assert machine.state is path[-1]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ([], S.DUPLEX_ACTIVE),
        ([S.IDLE], S.DUPLEX_PAUSED),
        ([S.IDLE], S.LOADING),
        ([S.IDLE, S.DUPLEX_ACTIVE], S.DUPLEX_ACTIVE),
        ([S.ERROR], S.IDLE),
    ],
)
def test_illegal_transition_names_from_and_to(
    before: list[WorkerState], after: WorkerState
) -> None:
    machine = WorkerStateMachine()
    for state in before:
        machine.to(state)
    start = machine.state
    with pytest.raises(IllegalTransition, match=f"from {start.value} to {after.value}"):
        machine.to(after)
    assert machine.state is start
