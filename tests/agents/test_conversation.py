"""The conversation as the caller experienced it, and what the LLM is shown of it."""

from agents.conversation import Conversation, Speaker, Turn

PERSONA = "You are a test persona."


def _bot_says(conversation: Conversation, text: str) -> Turn:
    turn = conversation.start_bot()
    turn.text = turn.intended = text
    return turn


def test_consecutive_caller_turns_merge_into_one() -> None:
    conversation = Conversation(PERSONA)
    first = conversation.add_caller("I'd like to book")
    second = conversation.add_caller("a table for two.")
    assert second is first
    assert [(t.speaker, t.text) for t in conversation.turns] == [
        (Speaker.CALLER, "I'd like to book a table for two.")
    ]


def test_a_caller_turn_after_a_bot_turn_is_a_new_turn() -> None:
    conversation = Conversation(PERSONA)
    first = conversation.add_caller("Hello?")
    _bot_says(conversation, "Hi there.")
    second = conversation.add_caller("Are you open today?")
    assert second is not first
    assert [t.speaker for t in conversation.turns] == [Speaker.CALLER, Speaker.BOT, Speaker.CALLER]


def test_every_turn_gets_its_own_id() -> None:
    conversation = Conversation(PERSONA)
    ids = [
        conversation.add_caller("one").turn_id,
        conversation.start_bot().turn_id,
        conversation.add_caller("two").turn_id,
    ]
    assert len(set(ids)) == 3


def test_keypad_digits_become_a_caller_turn_spelled_out() -> None:
    conversation = Conversation(PERSONA)
    turn = conversation.add_digits("123")
    assert turn.speaker is Speaker.CALLER
    assert turn.text == "(The caller pressed 1 2 3 on the keypad.)"


def test_heard_cuts_a_bot_turn_to_what_was_played_and_marks_it_truncated() -> None:
    conversation = Conversation(PERSONA)
    turn = _bot_says(conversation, "Your table is booked for seven people at eight.")
    conversation.heard(turn.turn_id, "Your table is booked")
    assert turn.text == "Your table is booked"
    assert turn.truncated
    assert turn.intended == "Your table is booked for seven people at eight."


def test_heard_nothing_removes_the_bot_turn() -> None:
    conversation = Conversation(PERSONA)
    conversation.add_caller("Hello?")
    turn = _bot_says(conversation, "Hi there, how can I help?")
    conversation.heard(turn.turn_id, "")
    assert turn not in conversation.turns
    assert [t.speaker for t in conversation.turns] == [Speaker.CALLER]


def test_a_cut_ends_the_bot_turn_where_it_stopped_with_what_was_heard() -> None:
    conversation = Conversation(PERSONA)
    turn = _bot_says(conversation, "We open at nine and close at six.")
    conversation.cut(turn.turn_id, "We open at nine", end_ms=5200.0)
    assert (turn.text, turn.end_ms, turn.truncated) == ("We open at nine", 5200.0, True)


def test_a_cut_after_every_word_was_heard_keeps_the_turn_whole() -> None:
    conversation = Conversation(PERSONA)
    turn = _bot_says(conversation, "We open at nine.")
    conversation.cut(turn.turn_id, "We open at nine.", end_ms=3100.0)
    assert (turn.text, turn.end_ms, turn.truncated) == ("We open at nine.", 3100.0, False)


def test_heard_ignores_an_unknown_turn() -> None:
    conversation = Conversation(PERSONA)
    turn = _bot_says(conversation, "Hi there.")
    conversation.heard(turn.turn_id + 100, "")
    assert conversation.turns == [turn]
    assert not turn.truncated


def test_heard_never_touches_a_caller_turn() -> None:
    conversation = Conversation(PERSONA)
    caller = conversation.add_caller("Hello there.")
    conversation.heard(caller.turn_id, "Hello")
    assert caller.text == "Hello there."
    assert not caller.truncated


def test_drop_forgets_a_turn() -> None:
    conversation = Conversation(PERSONA)
    caller = conversation.add_caller("Hello?")
    reply = conversation.start_bot()
    conversation.drop(reply)
    assert conversation.turns == [caller]


def test_dropping_a_turn_twice_is_harmless() -> None:
    conversation = Conversation(PERSONA)
    caller = conversation.add_caller("Hello?")
    reply = conversation.start_bot()
    conversation.drop(reply)
    conversation.drop(reply)
    assert conversation.turns == [caller]


def test_messages_start_with_the_persona_as_system_prompt() -> None:
    conversation = Conversation(PERSONA)
    conversation.add_caller("Hello?")
    assert conversation.messages() == [
        {"role": "system", "content": PERSONA},
        {"role": "user", "content": "Hello?"},
    ]


def test_messages_alternate_roles() -> None:
    conversation = Conversation(PERSONA)
    _bot_says(conversation, "Hello, how can I help?")
    conversation.add_caller("Book a table.")
    _bot_says(conversation, "For how many?")
    conversation.add_caller("Two.")
    roles = [m["role"] for m in conversation.messages()]
    assert roles == ["system", "assistant", "user", "assistant", "user"]


def test_messages_merge_caller_turns_separated_only_by_an_empty_bot_turn() -> None:
    conversation = Conversation(PERSONA)
    conversation.add_caller("Book a table")
    conversation.start_bot()  # a reply that never said anything
    conversation.add_caller("for two.")
    assert conversation.messages()[1:] == [{"role": "user", "content": "Book a table for two."}]


def test_a_truncated_bot_turn_ends_with_a_dash() -> None:
    conversation = Conversation(PERSONA)
    turn = _bot_says(conversation, "Your table is booked for seven people.")
    conversation.heard(turn.turn_id, "Your table is booked")
    conversation.add_caller("No, for six!")
    assert conversation.messages()[1:] == [
        {"role": "assistant", "content": "Your table is booked —"},
        {"role": "user", "content": "No, for six!"},
    ]


def test_a_whole_bot_turn_has_no_dash() -> None:
    conversation = Conversation(PERSONA)
    _bot_says(conversation, "Your table is booked.")
    assert conversation.messages()[-1] == {"role": "assistant", "content": "Your table is booked."}


def test_max_turns_keeps_only_the_most_recent_turns() -> None:
    conversation = Conversation(PERSONA, max_turns=3)
    for n in range(1, 4):
        conversation.add_caller(f"question {n}")
        _bot_says(conversation, f"answer {n}")
    assert conversation.messages() == [
        {"role": "system", "content": PERSONA},
        {"role": "assistant", "content": "answer 2"},
        {"role": "user", "content": "question 3"},
        {"role": "assistant", "content": "answer 3"},
    ]


def test_max_turns_does_not_count_empty_turns() -> None:
    conversation = Conversation(PERSONA, max_turns=2)
    conversation.add_caller("question")
    _bot_says(conversation, "answer")
    conversation.start_bot()  # still empty: a reply being generated
    assert [m["content"] for m in conversation.messages()] == [PERSONA, "question", "answer"]


def test_max_turns_zero_keeps_no_turns() -> None:
    conversation = Conversation(PERSONA, max_turns=0)
    conversation.add_caller("question")
    _bot_says(conversation, "answer")
    assert conversation.messages() == [{"role": "system", "content": PERSONA}]
