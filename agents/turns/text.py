"""What a transcript's words say about a turn: finished, trailing off, a backchannel."""

from __future__ import annotations

import re

__all__ = [
    "is_backchannel",
    "is_farewell",
    "looks_unfinished",
    "opens_an_interruption",
    "sentences",
    "takes_the_turn",
    "wants_a_person",
]

# Words a sentence does not end on (unless a question mark ends it: a preposition can
# close a question): someone who stops after one is still thinking. Closed classes only:
# articles, conjunctions, prepositions, possessive determiners, hesitations and the
# forms of "be".
_DANGLING = frozenset(
    """
    a an the and or but because if than to for of with at in on by from into about
    like my your our their um uh er erm is are was were am be
    """.split()
)

# What a listener says to keep a speaker going, not to take the turn. Whisper writes
# "mhm" as "Mm-hmm", "Mhm", "Hmm" or "Uh-huh", with or without punctuation.
_BACKCHANNELS = frozenset(
    """
    mhm mhmm mmhm mmhmm mm mmm hmm hm uhhuh uhuh uh huh yeah yes yep yup ok okay right sure
    alright aha ah oh gotcha true exactly indeed cool great nice wow
    """.split()
)
# ...and two-word ones, whose words alone are not (a pronoun or a verb on its own is the
# start of a sentence, not a listener's noise).
_BACKCHANNEL_PHRASES = frozenset(
    {("i", "see"), ("got", "it"), ("all", "right"), ("uh", "huh"), ("mm", "hmm")}
)
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")


def sentences(text: str) -> list[str]:
    """The sentences of a transcript, as Whisper punctuated them."""
    return [part for part in re.split(r"(?<=[.!?])\s+", text.strip()) if part]


def looks_unfinished(text: str) -> bool:
    """The words so far stop where a sentence cannot: on a function word ("for", "and",
    "the", "my", "is") or a comma, dash or ellipsis.

    Whisper often puts a full stop after a caller who paused mid-sentence ("I'd like a
    table for."), so the last word is the stronger sign.
    """
    stripped = text.strip()
    if not stripped:
        return False
    if stripped.endswith(("...", "…", ",", "-", "—", ":")):
        return True
    words = _WORD.findall(stripped.lower())
    return bool(words) and words[-1] in _DANGLING and not stripped.endswith("?")


# How a caller cutting into the bot opens: to stop or correct it, not to go on with
# their own sentence from before the bot spoke.
_INTERRUPTION_OPENERS = re.compile(
    r"^(?:(?:oh|um|uh|er)\s+)*(?:no|nope|wait|stop|sorry|actually|hey|hello|pardon"
    r"|excuse me|hold on|hang on|one (?:sec|second|moment))(?![\w'-])"
)


def opens_an_interruption(text: str) -> bool:
    """Words over the bot that stop or correct it rather than carry on with the
    caller's own sentence."""
    joined = " ".join(_WORD.findall(text.lower()))
    return _INTERRUPTION_OPENERS.match(joined) is not None


def is_backchannel(text: str) -> bool:
    """Only listener noises: the closed class of backchannels."""
    # Whisper spells hums out: "M-H-M", "Mm-hmm", "uh-huh", "M.H.M".
    words = [w.replace("-", "") for w in _WORD.findall(text.lower().replace(".", "-"))]
    if not words or len(words) > 4:
        return False
    at = 0
    while at < len(words):
        if tuple(words[at : at + 2]) in _BACKCHANNEL_PHRASES:
            at += 2
        elif words[at] in _BACKCHANNELS:
            at += 1
        else:
            return False
    return True


# A caller closing the call: the closed class of English leave-takings.
_FAREWELL = re.compile(
    r"\b(good ?bye|bye(?:[- ]bye)?|see you|talk (?:to you )?later"
    r"|have a (?:good|nice) (?:day|one|evening|night))\b"
)
_POLITE = frozenset(
    """
    that's thats that is all it thanks thank you so much very okay ok great perfect alright
    right no cool and then well again for your help everything lovely wonderful a lot
    lots oh ah fine good now cheers
    """.split()
)
# Not "yes", "yeah", "sure": a yes with a leave-taking answers the bot's question, and a
# goodbye line in its place would lose what was agreed.


def is_farewell(text: str) -> bool:
    """The caller is saying goodbye (and asking nothing more)."""
    lowered = text.lower().strip()
    if not lowered or "?" in lowered:
        return False
    if not _FAREWELL.search(lowered):
        return False
    # Everything else they said is politeness, not a request put before the goodbye.
    rest = _FAREWELL.sub(" ", lowered)
    return all(word in _POLITE for word in _WORD.findall(rest))


# Short words over the bot that mean "let me speak": a caller stopping it in a word or two.
_TURN_TAKING_WORDS = frozenset(
    """
    stop wait no nope hold hang sorry excuse pardon actually but what why how hey hello
    hi operator agent human person representative cancel repeat again help wrong not
    """.split()
)


def takes_the_turn(text: str, *, speech_ms: int) -> bool:
    """Short words over the bot that stop it: a word that claims the turn, a question,
    or a sentence of three words or more lasting 800 ms.

    Anything else that short is taken for a hum or a noise: Whisper spells a hummed
    backchannel as letters or unrelated short words (measured on espeak and Piper: up
    to four words within 740 ms), and a bot that stopped for those would never get a
    long reply out. Someone who meant to interrupt keeps talking, and that stops the bot
    by its length.
    """
    if is_backchannel(text):
        return False
    if text.rstrip().endswith("?"):
        return True
    words = _WORD.findall(text.lower())
    if len(words) >= 3 and speech_ms >= 800:
        return True
    return any(word in _TURN_TAKING_WORDS for word in words)


# A caller asking for a human: to speak to one, to be put through, or naming the role.
_PERSON = (
    r"(?:a |an |the |some |your )?(?:real |live |actual |human )?"
    r"(?:person|human|someone|somebody|agent|representative|operator|manager|staff)"
)
_WANTS_PERSON = re.compile(
    rf"\b(?:(?:speak|talk|chat)(?:ing)? (?:to|with) {_PERSON}"
    rf"|(?:transfer|put|connect) me(?: through)?(?: to {_PERSON})?"
    rf"|(?:get|give) me {_PERSON}"
    rf"|^(?:an? |the )?(?:real |live |human )?(?:operator|agent|representative|human)"
    rf"(?:,? please)?[.!]?$)"
)


def wants_a_person(text: str) -> bool:
    """The caller asks to be put through to a human."""
    lowered = " ".join(_WORD.findall(text.lower().replace("'", "'")))
    return _WANTS_PERSON.search(lowered) is not None
