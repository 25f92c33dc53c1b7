"""What a caller's words say (as Whisper writes them): a question, a request for a person."""

from __future__ import annotations

import pytest

from agents.turns.text import (
    addresses_the_listener,
    announces_more,
    asks_a_question,
    claims_the_floor,
    is_backchannel,
    is_farewell,
    looks_unfinished,
    makes_a_request,
    only_trails_off,
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


@pytest.mark.parametrize(
    "text",
    [
        "Tell me a long story about a lighthouse keeper and his dog.",
        "Explain in detail how to make fresh pasta at home.",
        "Please read my order back to me.",
        "Give me the number for the front desk!",
    ],
)
def test_a_turn_that_is_one_finished_request_wants_an_answer(text: str) -> None:
    assert makes_a_request(text)


@pytest.mark.parametrize(
    "text",
    [
        # Read out inside a longer text: the reader goes on.
        "The address is twelve Baker Street. Please ring the bell twice.",
        "Let me explain the whole thing.",  # the caller is about to go on
        "Tell me about",  # not finished
        "Tell me about the.",  # stops on a word a sentence does not end on
        "Tell me.",  # too short to say what is wanted
        "I'd like to book a table for four.",
        "",
    ],
)
def test_other_turns_are_not_requests(text: str) -> None:
    assert not makes_a_request(text)


@pytest.mark.parametrize(
    "text",
    [
        "I'd like to book a table for.",
        "And the",
        "Thank.",
        "So, um",
        "We need it by,",
        "Yeah, I.",  # "Yeah, I | think so" over a reply's end: not an answer yet
    ],
)
def test_words_that_stop_where_a_sentence_cannot_look_unfinished(text: str) -> None:
    assert looks_unfinished(text)


@pytest.mark.parametrize(
    "text",
    [
        # Whisper's question mark at a 1 s pause before "is open on Sunday" (bench turns).
        "Could you check whether the pharmacy on Main Street?",
        "Can you check if my order?",
        "Please ring the bell twice, because the first one.",
        "I'm calling about my order. Do you know whether the courier from yesterday?",
        "My count number.",  # "My account number | is..." under babble
        "Hi. My phone number",
    ],
)
def test_a_clause_with_its_subject_and_no_verb_yet_looks_unfinished(text: str) -> None:
    assert looks_unfinished(text)


@pytest.mark.parametrize(
    "text",
    [
        "Thank you.",
        "Thanks.",
        "What is it for?",
        "A table for four.",
        "",
        "Could you check whether the pharmacy on Main Street is open on Sunday?",
        "Do you know if they deliver?",
        "Can you tell me if the store opens early?",
        "I wonder if you could help me.",
        "Call me back if possible.",
        "Please ring the bell twice, because the first one is broken.",
        "Is it open even if it's raining?",
        "My pleasure.",
        "My order was late.",
        "My order arrived.",
        "My account number 4729.",  # the number is the sentence's point
        "My account number is 4 7 2.",
        "So do I.",
        "Neither am I.",
    ],
)
def test_finished_words_do_not_look_unfinished(text: str) -> None:
    assert not looks_unfinished(text)


@pytest.mark.parametrize(
    "text",
    [
        "No wait.",
        "Wait.",
        "Hold on.",
        "Actually,",
        "Hang on a second.",
        "One moment.",
        "Thanks.",
        "Thank you so much.",
        "I think.",  # Whisper's "Thanks," on the echo line
        "Well, I mean.",
        "So.",
        "Thanks, that's all.",  # the goodbye follows a sentence's pause later
        "No, that's it.",
        "Great.",  # "Great, | thanks a lot. Goodbye!" under babble
        "Okay, perfect.",
    ],
)
def test_words_that_open_a_turn_claim_the_floor(text: str) -> None:
    assert claims_the_floor(text)


@pytest.mark.parametrize(
    "text",
    [
        "Yes.",
        "Friday evening.",
        "No, Saturday.",
        "I think so.",
        "Thanks, bye.",  # a farewell, answered at once
        "That's all I need to know.",
        # Said whole, it is a turn of its own, not an opening.
        "No wait, actually I meant Saturday, can you check?",
        "",
    ],
)
def test_other_short_words_do_not_claim_the_floor(text: str) -> None:
    assert not claims_the_floor(text)


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
    [
        "I'm going to read you my whole order, so please let me finish.",
        "Let me explain.",
        "Okay, let me think.",
        "I am going to list the items.",
        "Bear with me, it's a long one.",
    ],
)
def test_a_caller_who_says_more_is_coming_announces_it(text: str) -> None:
    assert announces_more(text)


@pytest.mark.parametrize(
    "text",
    ["I'm going to the pharmacy tomorrow.", "Let me know when you open.", "That's all, bye."],
)
def test_plain_statements_announce_nothing(text: str) -> None:
    assert not announces_more(text)


@pytest.mark.parametrize(
    ("text", "trails_off"),
    [
        ("Weather...", True),
        ("So that's it…", True),
        ("I'd like to book a table for...", False),
        ("Could you check whether the pharmacy...", False),
        ("Weather.", False),
        ("...", False),
    ],
)
def test_only_the_ellipsis_leaves_some_words_unfinished(text: str, trails_off: bool) -> None:
    assert only_trails_off(text) is trails_off


@pytest.mark.parametrize(
    "text",
    ["No wait, actually I meant Saturday.", "Sorry, I meant Friday.", "Hold on.", "Um, stop."],
)
def test_words_that_stop_or_correct_the_bot_open_an_interruption(text: str) -> None:
    assert opens_an_interruption(text)


@pytest.mark.parametrize(
    ("text", "addressed"),
    [
        ("can you read it back to me?", True),
        ("Is your kitchen open?", True),
        ("You'll call me back?", True),
        ("did I wrap in 12 maker tree?", False),
        ("Is it open?", False),
        ("Younger guests welcome?", False),  # a word that starts like one is not
    ],
)
def test_a_question_to_the_listener_says_you(text: str, addressed: bool) -> None:
    assert addresses_the_listener(text) is addressed


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
