"""`bench hotwords`: an operator's words for Whisper, on lines nobody here wrote that name
something."""

from __future__ import annotations

from benchmarks.hotwords import Heard, named_lines, names_heard, operator_list, score
from benchmarks.judge_material import corpus_pairs


def test_a_name_is_a_capitalised_word_the_corpus_never_writes_in_lower_case() -> None:
    lines = [
        "I have read everything in Project Gutenberg.",
        "Gutenberg printed books.",
        "The project is done.",
        "Although it rained, Moravec's came.",
        "Although I agree.",
        "From the dawn of man to the age of AI.'",
        "AI is here.",
        '"I agree." Then nothing.',  # "Then" begins a sentence after a quote
    ]

    found = dict(named_lines(lines))

    # "Project" is written "project" elsewhere; "The" and "Although" only start sentences.
    assert found == {
        "I have read everything in Project Gutenberg.": ("Gutenberg",),
        "Gutenberg printed books.": ("Gutenberg",),
        "Although it rained, Moravec's came.": ("Moravec",),
        "From the dawn of man to the age of AI.'": ("AI",),  # not "AI.'"
        "AI is here.": ("AI",),
    }


def test_names_are_heard_whatever_their_case_or_possessive() -> None:
    assert names_heard(("Tolkein", "Baggins"), "Bilbo baggins is in Tolkein's book.") == 2
    assert names_heard(("Moravec",), "It is a book about robots by Hans more of Mac.") == 0


def test_listed_names_written_where_nobody_said_them_are_counted() -> None:
    listed = ("Dune", "Hobbit", "Moravec")
    said = Heard(
        0, "Dune is good.", ("Dune",), "espeak en-us 150 wpm", "clean",
        "Doom is good,", "Dune is good, Hobbit.", "heard", "heard", listed,
    )  # fmt: skip
    noise = Heard(0, "", (), "", "babble", "", "Moravec.", "nothing", "heard", listed)

    figures = score([said, noise])

    plain, prompted = figures["plain"], figures["prompted"]
    assert (plain["names_heard"], prompted["names_heard"]) == (0, 1)
    # "Hobbit" was not said in that line, "Moravec" not over the babble.
    assert (plain["lines_with_a_name_not_said"], prompted["lines_with_a_name_not_said"]) == (0, 1)
    assert (plain["noise_with_a_name"], prompted["noise_with_a_name"]) == (0, 1)
    assert (plain["noise_with_words"], prompted["noise_with_words"]) == (0, 1)
    assert (plain["noise_heard"], prompted["noise_heard"]) == (0, 1)
    assert (plain["lines_ending_in_a_comma"], prompted["lines_ending_in_a_comma"]) == (1, 0)


def test_an_operators_list_for_bench_turns_names_what_its_callers_say_and_more() -> None:
    named = named_lines([caller for _, caller in corpus_pairs()])
    said = [line for line, _ in named[:3]] + ["A line with no name in it."]

    listed = operator_list(said, seed=7).split(", ")

    assert len(listed) == len(set(listed)) == 30
    for _, names in named[:3]:
        assert set(names) <= set(listed)
    # Drawn by the seed: the same run lists the same words, another run others.
    assert operator_list(said, seed=7).split(", ") == listed
    assert operator_list(said, seed=8).split(", ") != listed
