"""`bench hotwords`: an operator's words for Whisper, on lines nobody here wrote that name
something."""

from __future__ import annotations

from benchmarks.hotwords import Heard, named_lines, names_heard, score


def test_a_name_is_a_capitalised_word_the_corpus_never_writes_in_lower_case() -> None:
    lines = [
        "I have read everything in Project Gutenberg.",
        "Gutenberg printed books.",
        "The project is done.",
        "Although it rained, Moravec's came.",
        "Although I agree.",
    ]

    found = dict(named_lines(lines))

    # "Project" is written "project" elsewhere; "The" and "Although" only start sentences.
    assert found == {
        "I have read everything in Project Gutenberg.": ("Gutenberg",),
        "Gutenberg printed books.": ("Gutenberg",),
        "Although it rained, Moravec's came.": ("Moravec",),
    }


def test_names_are_heard_whatever_their_case_or_possessive() -> None:
    assert names_heard(("Tolkein", "Baggins"), "Bilbo baggins is in Tolkein's book.") == 2
    assert names_heard(("Moravec",), "It is a book about robots by Hans more of Mac.") == 0


def test_a_vocabulary_word_written_over_babble_alone_is_counted() -> None:
    said = Heard(
        0,
        "Dune is good.",
        ("dune",),
        "espeak en-us 150 wpm",
        "clean",
        "Doom is good.",
        "Dune is good.",
    )
    noise = Heard(0, "", (), "", "babble", "", "Dune.", "nothing", "heard")

    figures = score([said, noise])

    assert figures["plain"]["names_heard"] == 0 and figures["prompted"]["names_heard"] == 1
    assert figures["plain"]["noise_with_words"] == 0
    assert figures["prompted"]["noise_with_a_name"] == 1
    assert (figures["plain"]["noise_heard"], figures["prompted"]["noise_heard"]) == (0, 1)
