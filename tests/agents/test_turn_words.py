"""A caller asking for a person, from their words (what Whisper writes)."""

from __future__ import annotations

import pytest

from agents.turns.text import wants_a_person


@pytest.mark.parametrize(
    "text",
    [
        "Can I talk to a real person, please?",
        "I want to speak with someone about my bill.",
        "Transfer me to an agent, please.",
        "Transfer me.",
        "Put me through to a representative.",
        "Get me a human.",
        "Operator!",
        "Agent, please.",
        "I'd like to talk to a human, clean.",  # espeak's "please" as Whisper heard it
    ],
)
def test_asking_for_a_person_is_heard(text: str) -> None:
    assert wants_a_person(text)


@pytest.mark.parametrize(
    "text",
    [
        "What time do you open?",
        "The person at the desk was very helpful.",
        "My agent number is 42.",
        "Thank you, bye!",
        "Can you transfer the money to my savings?",
        "",
    ],
)
def test_other_words_are_not_a_request_for_a_person(text: str) -> None:
    assert not wants_a_person(text)
