"""Cutting streamed LLM text into clauses the TTS can speak early."""

import threading

import pytest

from agents.cascade.clauses import ClauseSplitter, speakable


def _feed_all(splitter: ClauseSplitter, deltas: list[str]) -> list[str]:
    clauses: list[str] = []
    for delta in deltas:
        clauses += splitter.feed(delta)
    return clauses


def test_a_sentence_is_a_clause_once_the_next_word_begins() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("Your table is booked.") == []
    assert splitter.feed(" See") == ["Your table is booked."]


def test_the_first_clause_may_end_at_a_comma_once_it_has_first_min_words() -> None:
    splitter = ClauseSplitter(first_min_words=4)
    assert splitter.feed("Of course I can, ") == ["Of course I can,"]


def test_the_first_clause_does_not_end_at_a_comma_before_first_min_words() -> None:
    splitter = ClauseSplitter(first_min_words=4)
    assert splitter.feed("Yes I can, ") == []
    assert splitter.flush() == ["Yes I can,"]


def test_the_first_clause_may_end_at_a_later_comma_after_a_short_opening() -> None:
    splitter = ClauseSplitter(first_min_words=4)
    assert splitter.feed("Sure, I can help with that, of ") == ["Sure, I can help with that,"]


def test_once_the_lead_is_out_clauses_end_only_at_a_sentence_end() -> None:
    splitter = ClauseSplitter(first_min_words=4, lead_words=4)
    deltas = ["Of course I can, ", "the table for two, ", "at eight, ", "is booked. "]
    clauses = _feed_all(splitter, deltas)
    assert clauses == ["Of course I can,", "the table for two, at eight, is booked."]


def test_until_the_lead_is_out_a_later_clause_may_end_at_a_comma() -> None:
    # "You're in luck." is under a second of audio: the next sentence must not have to be
    # written whole before any of it is spoken, or the caller hears a gap.
    splitter = ClauseSplitter(lead_words=12)
    deltas = ["You're in luck. ", "We deliver every day of the week, ", "from nine to five. "]
    assert _feed_all(splitter, deltas) == [
        "You're in luck.",
        "We deliver every day of the week,",
        "from nine to five.",
    ]


def test_a_long_first_clause_is_cut_before_a_phrase_opening_word() -> None:
    splitter = ClauseSplitter(phrase_words=6)
    clauses = splitter.feed("You can make fresh pasta at home with a little ")
    assert clauses == ["You can make fresh pasta at home"]
    assert splitter.flush() == ["with a little"]


def test_a_phrase_cut_needs_phrase_words_before_it() -> None:
    splitter = ClauseSplitter(phrase_words=6)
    assert splitter.feed("The pharmacy is open from ") == []
    assert splitter.feed("ten am to ") == ["The pharmacy is open from ten am"]
    assert splitter.feed("four pm. ") == ["to four pm."]


def test_a_phrase_cut_waits_for_the_whole_word() -> None:
    # "for" may be the start of "fortune".
    splitter = ClauseSplitter(phrase_words=3)
    assert splitter.feed("We wish you good for") == []
    assert splitter.feed("tune today ") == []
    assert splitter.flush() == ["We wish you good fortune today"]


def test_after_the_lead_long_sentences_are_not_cut_at_phrases() -> None:
    splitter = ClauseSplitter(phrase_words=6, lead_words=3)
    assert splitter.feed("Yes we can. ") == ["Yes we can."]
    assert splitter.feed("The kitchen stays open late on Fridays and ") == []


@pytest.mark.parametrize("end", [".", "!", "?", "…", '."', ".)"])
def test_sentence_ends_include_closing_quotes_and_brackets(end: str) -> None:
    splitter = ClauseSplitter()
    assert splitter.feed(f"We open at nine{end} Then") == [f"We open at nine{end}"]


def test_deltas_split_mid_word_reassemble() -> None:
    splitter = ClauseSplitter()
    deltas = ["Cert", "ainly, I ca", "n do th", "at. Your ta", "ble is rea", "dy.", " "]
    assert _feed_all(splitter, deltas) == ["Certainly, I can do that.", "Your table is ready."]


def test_markdown_is_removed() -> None:
    splitter = ClauseSplitter()
    clauses = splitter.feed("**Sure** thing. Here is `the` _plan_: # step [one]. ")
    assert clauses == ["Sure thing.", "Here is the plan: step one."]


def test_emoji_are_removed() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("Great news 🎉 it is booked ✅. ") == ["Great news it is booked ."]


def test_a_clause_of_nothing_but_markdown_is_skipped() -> None:
    splitter = ClauseSplitter(max_words=3)
    assert splitter.feed("** ## __ ~~ >> Hello") == []
    assert splitter.flush() == ["Hello"]


def test_flush_returns_the_rest() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("Your table is booked. See you") == ["Your table is booked."]
    assert splitter.flush() == ["See you"]


def test_flush_empties_the_splitter() -> None:
    splitter = ClauseSplitter()
    splitter.feed("See you")
    splitter.flush()
    assert splitter.flush() == []


def test_flush_of_only_whitespace_and_markdown_returns_nothing() -> None:
    splitter = ClauseSplitter()
    splitter.feed("  ** \n ")
    assert splitter.flush() == []


def test_long_unpunctuated_text_is_cut_at_max_words() -> None:
    splitter = ClauseSplitter(max_words=10)
    words = [f"w{n}" for n in range(25)]
    clauses = _feed_all(splitter, [f"{word} " for word in words])
    assert clauses == [" ".join(words[:10]), " ".join(words[10:20])]
    assert splitter.flush() == [" ".join(words[20:])]


def test_long_unpunctuated_text_in_one_delta_is_cut_at_max_words() -> None:
    splitter = ClauseSplitter(max_words=10)
    words = [f"w{n}" for n in range(25)]
    clauses = splitter.feed(" ".join(words) + " ") + splitter.flush()
    assert clauses == [" ".join(words[:10]), " ".join(words[10:20]), " ".join(words[20:])]


def test_speakable_collapses_whitespace() -> None:
    assert speakable("  Hello\n\n  *there*  ") == "Hello there"


@pytest.mark.parametrize(
    ("written", "said"),
    [
        (
            "Find it on our website: www.hotel-online.com/booking/table/Friday-Night/Book.html.",
            "Find it on our website: hotel-online dot com.",
        ),
        (
            "Go to https://example.org/reset?user=1, then log in.",
            "Go to example dot org, then log in.",
        ),
        (
            "It is at www.tableforFriday.com/sunday-2018/ and free.",
            "It is at tableforFriday dot com and free.",
        ),
        ("Mail us at support@sundaybooking.com.", "Mail us at support at sundaybooking dot com."),
        ("Order at example.co.nz/menu today.", "Order at example dot co dot nz today."),
        ("Try shop.example.io:8080/x now.", "Try shop dot example dot io now."),
        (
            "Visit our website (www.hotel.com) to book.",
            "Visit our website (hotel dot com) to book.",
        ),
    ],
)
def test_a_web_or_mail_address_is_said_as_the_site_s_name(written: str, said: str) -> None:
    assert speakable(written) == said


def test_a_link_written_twice_or_under_its_text_is_said_once() -> None:
    doubled = "Visit www.whopper.com/reset(http://www.whopper.com/reset) and log in."
    assert speakable(doubled) == "Visit whopper dot com and log in."
    assert speakable("Read [the guide](https://docs.example.io/x).") == "Read the guide."


@pytest.mark.parametrize(
    "text",
    [
        "We open at 9.00am, e.g. on Mondays; version 2.5 is out. Mr. Smith called 1-800-763-2459.",
        "Thanks.Me too.",  # a missing space, not a site
        "Sure.Co-op members, see menu.pdf, U.S.A. and Dr.Smith.",
    ],
)
def test_text_that_only_looks_dotted_is_left_alone(text: str) -> None:
    assert speakable(text) == text


def test_a_long_run_of_dotted_text_costs_no_more_than_its_length() -> None:
    # Unbounded labels took 50 s on these 32,000 characters (quadratic); bounded, ~0.1 s.
    # (A margin of 100x over that: no timing flake, but a quadratic rule fails.)
    dotted = "a." * 16_000
    done: list[str] = []
    worker = threading.Thread(target=lambda: done.append(speakable(dotted)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done == [dotted.strip()]


def test_an_address_stays_in_its_clause_and_the_sentence_after_it_is_cut() -> None:
    splitter = ClauseSplitter(lead_words=0)
    clauses = splitter.feed("See www.example.com/a/b.html. It has the menu. ")
    assert clauses == ["See example dot com.", "It has the menu."]


def test_punctuation_alone_is_no_clause() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("— ") == [] and splitter.flush() == []
    assert speakable("...") == "" and speakable("— Yes.") == "— Yes."
