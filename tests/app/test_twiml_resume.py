"""The TwiML around a call's stream: what Twilio runs once the stream closes."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest
from starlette.requests import Request

from app.call_resume import MAX_RESUMES, admission_key, redirect_url, resume_number
from telephony.twiml import connect_stream_twiml, hangup_twiml

STREAM = "wss://bot.example.com/twilio/media"


def verbs(twiml: str) -> list[str]:
    return [verb.tag for verb in ElementTree.fromstring(twiml)]


def request_to(query: str) -> Request:
    return Request(
        {
            "type": "http",
            "method": "POST",
            "path": "/twilio/voice",
            "query_string": query.encode(),
            "headers": [],
        }
    )


def test_without_a_redirect_the_stream_is_followed_by_a_hangup() -> None:
    assert verbs(connect_stream_twiml(STREAM, {"token": "t"})) == ["Connect", "Hangup"]


def test_with_a_redirect_the_call_goes_on_at_that_url() -> None:
    url = "https://bot.example.com/twilio/voice?resume=1"
    twiml = connect_stream_twiml(STREAM, {}, redirect_url=url, say_first="Sorry.")
    assert verbs(twiml) == ["Say", "Connect", "Redirect"]
    redirect = ElementTree.fromstring(twiml).find("Redirect")
    assert redirect is not None and redirect.text == url and redirect.get("method") == "POST"


@pytest.mark.parametrize("bad", ["ftp://x/y", "not a url", "https://x/\x01"])
def test_a_redirect_twilio_could_not_follow_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        connect_stream_twiml(STREAM, {}, redirect_url=bad)


def test_hangup_alone_ends_the_call() -> None:
    assert verbs(hangup_twiml()) == ["Hangup"]


def test_the_redirect_counts_resumes_and_keeps_the_calls_own_query() -> None:
    request = request_to("outbound=1&amd=1&greeting=Hi+there&resume=1")
    url = redirect_url("https://bot.example.com", request, 1)
    assert url == "https://bot.example.com/twilio/voice?outbound=1&greeting=Hi+there&resume=2"


def test_resumes_are_bounded() -> None:
    assert redirect_url("https://bot.example.com", request_to(""), MAX_RESUMES) is None


@pytest.mark.parametrize(
    ("raw", "number"),
    [
        ("", 0),
        ("1", 1),
        (str(MAX_RESUMES), MAX_RESUMES),
        (str(MAX_RESUMES + 1), 0),
        ("0", 0),
        ("-1", 0),
        ("1e3", 0),
        ("\u0661", 0),
    ],
)
def test_only_a_resume_within_bounds_counts(raw: str, number: int) -> None:
    assert resume_number(raw) == number


def test_each_resume_has_an_admission_key_of_its_own() -> None:
    sid = "CA" + "1" * 32
    assert admission_key(sid, 0) == sid
    assert len({admission_key(sid, n) for n in range(MAX_RESUMES + 1)}) == MAX_RESUMES + 1
