"""What a caller's words say (as Whisper writes them): a question, a request for a person."""

from __future__ import annotations

import pytest

from agents.turns.text import asks_a_question, wants_a_person


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


@pytest.mark.parametrize(
    "text",
    [
        "What time do you open tomorrow?",
        # Whisper drops the question mark when the voice does not rise.
        "Can you tell me in detail everything I need to know about booking a table.",
        "Is the pharmacy open on Sunday.",
        "I'm calling about my order. Where is it now.",
        "How much is parking.",
    ],
)
def test_a_finished_question_is_heard_with_or_without_its_question_mark(text: str) -> None:
    assert asks_a_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "I'd like to book a table for four.",
        "What I need is a table for four.",  # a wh-word with its subject: a statement
        "Will do.",
        "Can you tell me about",  # not finished
        "Is it.",
        "",
    ],
)
def test_statements_and_unfinished_words_are_not_questions(text: str) -> None:
    assert not asks_a_question(text)
