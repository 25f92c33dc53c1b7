"""What a caller's words say (as Whisper writes them): a question, a request for a person."""

from __future__ import annotations

import pytest

from agents.turns.text import (
    is_backchannel,
    is_farewell,
    looks_unfinished,
    opens_an_interruption,
    sentences,
    wants_a_person,
)


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
        "I'd like to book a table for.",
        "And the",
        "So, um",
        "We need it by,",
        "It is the one with my",
        "The problem is.",
    ],
)
def test_words_that_stop_where_a_sentence_cannot_look_unfinished(text: str) -> None:
    assert looks_unfinished(text)


@pytest.mark.parametrize(
    "text",
    [
        "Thank you.",
        "Thanks.",
        "What is it for?",  # a preposition can close a question
        "A table for four.",
        "",
        "Do you know if they deliver?",
        "Is it open even if it's raining?",
        "So do I.",
    ],
)
def test_finished_words_do_not_look_unfinished(text: str) -> None:
    assert not looks_unfinished(text)


def test_sentences_are_split_where_whisper_punctuated_them() -> None:
    assert sentences(" First, two pizzas. Then bread? Yes! And ") == [
        "First, two pizzas.",
        "Then bread?",
        "Yes!",
        "And",
    ]
    assert sentences("") == []


@pytest.mark.parametrize(
    "text",
    ["No wait, actually I meant Saturday.", "Sorry, I meant Friday.", "Hold on.", "Um, stop."],
)
def test_words_that_stop_or_correct_the_bot_open_an_interruption(text: str) -> None:
    assert opens_an_interruption(text)


@pytest.mark.parametrize(
    "text",
    [
        "Six people next Tuesday at noon.",
        "is open on Sunday?",
        "Twice.",
        "Nobody came.",
        "No-show fees, right?",
    ],
)
def test_a_sentence_going_on_opens_no_interruption(text: str) -> None:
    assert not opens_an_interruption(text)


@pytest.mark.parametrize(
    "text",
    [
        "Bye.",
        "Thanks, bye.",
        "Thank you so much, goodbye!",
        "That's all. Goodbye!",
        "Oh, bye.",  # espeak's "Bye!" after a clause cut short, as tiny.en heard it
        "Okay, bye now.",
        "Oh, bye bye.",
        "Cheers, see you.",
        "Great, thanks a lot. Have a good day.",
    ],
)
def test_a_goodbye_is_a_farewell(text: str) -> None:
    assert is_farewell(text)


@pytest.mark.parametrize(
    "text",
    [
        "Bye, but first tell me the hours.",
        "Goodbye? Are you hanging up?",
        "Yes, I said bye to my sister and then the table was gone.",
        "Thank you.",  # thanks alone keeps the call: the caller may go on
        "Yes, see you then.",  # a yes to "Shall I book it?": the LLM answers, not a goodbye
        "Sure, bye.",
        "Okay.",
    ],
)
def test_words_around_a_goodbye_that_ask_more_are_not_a_farewell(text: str) -> None:
    assert not is_farewell(text)


@pytest.mark.parametrize(
    "text", ["Mm-hmm.", "Mhm", "Uh-huh.", "Yeah, yeah.", "Oh, I see.", "Okay, got it.", "Right."]
)
def test_listener_noises_are_backchannels(text: str) -> None:
    assert is_backchannel(text)


@pytest.mark.parametrize("text", ["It.", "See?", "I.", "Got.", "Yeah, I got the", "No."])
def test_a_word_of_a_backchannel_phrase_alone_is_not_one(text: str) -> None:
    assert not is_backchannel(text)
