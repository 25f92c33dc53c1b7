"""What a transcript's words say about a turn: finished, trailing off, a backchannel."""

from __future__ import annotations

import re

__all__ = [
    "addresses_the_listener",
    "asks_a_question",
    "claims_the_floor",
    "is_backchannel",
    "is_farewell",
    "looks_unfinished",
    "makes_a_request",
    "only_trails_off",
    "opens_an_interruption",
    "sentences",
    "sounds_finished",
    "takes_the_turn",
    "wants_a_person",
]

# Words a sentence does not end on (unless a question mark ends it: a preposition can
# close a question): someone who stops after one is still thinking. "Thank" is half of
# "thank you": Whisper writes it alone, with a full stop, when the caller pauses there.
_DANGLING = frozenset(
    """
    a an the and or but because if than to for of with at in on by from into about
    like my your our their um uh er erm is are was were am be thank
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


def sounds_finished(text: str) -> bool:
    """Whisper ends a complete sentence with . ? or ! and a trailing-off one with ..."""
    text = text.rstrip()
    return text.endswith(("?", "!", ".")) and not text.endswith("..")


def looks_unfinished(text: str) -> bool:
    """The words so far stop where a sentence cannot: on "for", "and", "the", a comma,
    or inside a clause that has its subject and not yet its verb.

    Whisper often puts a full stop after a caller who paused mid-sentence ("I'd like a
    table for."), so the last word is the stronger sign.
    """
    stripped = text.strip()
    if not stripped:
        return False
    if stripped.endswith(("...", "…", ",", "-", "—", ":")):
        return True
    words = _WORD.findall(stripped.lower())
    if not words:
        return False
    if words[-1] in _DANGLING and not stripped.endswith("?"):
        return True
    if words[-1] == "i" and not (len(words) > 1 and _verb_like(words[-2])):
        return True  # a subject "I" still wants its verb; after a verb it ends the clause
    last = _WORD.findall(sentences(stripped)[-1].lower())
    return _clause_without_verb(last) or _subject_without_verb(last)


_LISTENER = frozenset("you your yours you're you'll you've you'd".split())


def addresses_the_listener(text: str) -> bool:
    """The words speak to the one listening ("can you...", "is your..."): a question
    of them is put to the bot, not read out or made up of a garble."""
    return any(word in _LISTENER for word in _WORD.findall(text.lower()))


def only_trails_off(text: str) -> bool:
    """Unfinished only by Whisper's ellipsis: the words before it could end a sentence
    (a one-word question said flat), unlike words ending on a preposition."""
    stripped = text.strip()
    if not stripped.endswith(("...", "…")):
        return False
    words = stripped.rstrip(".… ")
    return bool(words) and not looks_unfinished(words)


# Words that open a clause needing a verb of its own ("whether <subject> <verb>").
_SUBORDINATORS = frozenset(
    "whether if because unless until although though since while whereas".split()
)
# ...when the next word starts its subject ("if possible", "whether or not" need none).
_SUBJECT_STARTS = frozenset(
    "the a an my your our their his her its this these those i you we they he she it".split()
)
# Finite verbs a clause ends on, and common ones in base form (after "if they").
# A word ending in -s, -ed or -ing, or a contraction, counts as a verb too: a clause
# taken for finished when it was not costs nothing new (it is answered as before).
_VERBS = frozenset(
    """
    am is are was were be been do does did have has had can could will would shall should
    may might must need go come get make take give open close work stay sell deliver
    accept carry know see say tell think want like call help run pay cost ship arrive
    leave start finish end book cancel change fit serve offer charge include exist happen
    matter apply allow hold keep let put set send bring buy find win lose
    """.split()
)


def _clause_without_verb(words: list[str]) -> bool:
    """Words ending inside a subordinate clause that has a subject and no verb yet.

    Whisper puts a question mark or a full stop at a pause inside such a clause, and
    Smart Turn can be sure of it there, so the clause's grammar is the only sign left."""
    at = max((i for i, word in enumerate(words) if word in _SUBORDINATORS), default=-1)
    clause = words[at + 1 :]
    if at <= 0 or len(clause) < 2 or clause[0] not in _SUBJECT_STARTS:
        return False
    return not any(_verb_like(word) for word in clause)


# A sentence that is only "my ..." and a noun or two is mostly the subject of one to
# come, which Whisper closes with a full stop at the pause before its verb. Two words
# are a sentence of their own (an idiom), and so is one with a number in it (the
# number is what was asked for); a bare noun phrase given as an answer only waits
# longer, and its reply is drafted meanwhile.
_POSSESSIVES = frozenset("my our".split())


def _subject_without_verb(words: list[str]) -> bool:
    if not 3 <= len(words) <= 4 or words[0] not in _POSSESSIVES:
        return False
    if any(any(ch.isdigit() for ch in word) for word in words):
        return False
    return not any(_verb_like(word) for word in words)


def _verb_like(word: str) -> bool:
    return word in _VERBS or "'" in word or word.endswith(("s", "ed", "ing"))


# How an English question opens. Whisper drops the question mark when the voice does not
# rise (flat callers, synthetic voices), and the opening is what is left of it.
_QUESTION_OPENERS = frozenset(
    """
    what when where who whom whose which why how can could would will do does did is are
    was were should shall may might have has am
    """.split()
)
_WH = frozenset("what when where who whom whose which why how".split())
# ...but a wh-word followed by its subject opens a statement (a pseudo-cleft).
_SUBJECTS = frozenset("i we you they he she it".split())


def asks_a_question(text: str) -> bool:
    """A finished question: a question mark, or a finished sentence of three words or more
    that opens like one (a question said flat, which Whisper closes with a full stop)."""
    stripped = text.strip()
    if stripped.endswith("?"):
        return True
    if not sounds_finished(stripped):
        return False
    # The last sentence is the one that asks: a statement may come before it.
    last = sentences(stripped)[-1]
    words = _WORD.findall(last.lower())
    if len(words) < 3 or words[0] not in _QUESTION_OPENERS:
        return False
    return not (words[0] in _WH and words[1] in _SUBJECTS)


# How a request opens: an imperative verb, with or without "please".
_REQUEST_OPENERS = frozenset(
    """
    tell explain give show describe list read repeat send check find help recommend
    suggest book cancel remind spell confirm
    """.split()
)


def makes_a_request(text: str) -> bool:
    """A whole turn that is one finished request (an imperative sentence).

    A request wants an answer as much as a question does, and Smart Turn scores it as low
    on a flat voice. Only a turn of one sentence counts: a request read out inside a
    longer text (delivery instructions, say) is not the end of it.
    """
    stripped = text.strip()
    if not sounds_finished(stripped) or looks_unfinished(stripped):
        return False
    if len(sentences(stripped)) > 1:
        return False
    words = _WORD.findall(stripped.lower())
    if words and words[0] == "please":
        words = words[1:]
    return len(words) >= 3 and words[0] in _REQUEST_OPENERS


# A caller taking the floor before saying what they want, then pausing.
_FLOOR_CLAIMS = re.compile(
    r"\b(?:wait|hold on|hang on|actually|one (?:sec|second|moment)|just a (?:sec|second|moment)"
    r"|let me|excuse me)\b"
)


# Thanks on their own lead on: to a closing, or to one more request.
_THANKS = re.compile(r"^(?:(?:thanks|thank you|cheers)(?: (?:so|very) much| a lot)?\s*)+$")
# A hedge on its own opens a sentence; no one answers with it (a few can be answers).
# Whisper also makes hedges of other short openings misheard on a poor line.
_OPENERS = re.compile(r"^(?:(?:oh|well|so|um|uh) )*(?:i think|i mean|you know|well|so)$")
# A closing of what the caller wanted is mostly followed by the goodbye after a
# sentence's pause: answered in it, the bot speaks over the goodbye.
_CLOSINGS = re.compile(
    r"^(?:(?:thanks|thank you|okay|ok|no|well|so)\s+)*(?:that's|that is) (?:all|it|everything)$"
)

# An acknowledgement on its own mostly leads on too: Whisper closes it with a full stop
# at the comma's pause, and Smart Turn is sure of it. Alone, it waits a statement's pause.
_ACKNOWLEDGEMENTS = re.compile(
    r"^(?:(?:oh|okay|ok) )?(?:great|okay|ok|alright|all right|perfect|awesome|wonderful"
    r"|excellent|cool)$"
)


def claims_the_floor(text: str) -> bool:
    """Words that open a turn rather than make one: a claim on the floor, thanks on
    their own, a hedge, or the closing of a request (before the goodbye).

    Whisper closes them with a full stop at the comma pause after them, and Smart Turn
    is sure of them: answered as short answers, the bot speaks over what follows.
    """
    words = _WORD.findall(text.lower())
    if not 0 < len(words) <= 4:
        return False
    joined = " ".join(words)
    if _FLOOR_CLAIMS.search(joined) is not None:
        return True
    rules = (_THANKS, _OPENERS, _CLOSINGS, _ACKNOWLEDGEMENTS)
    return any(rule.match(joined) is not None for rule in rules)


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


# A caller saying that more is coming (a list, a spelling, a text read out): the pauses
# between its parts sound final, and a bot sure of a finished statement answers in them.
_ANNOUNCES_MORE = re.compile(
    r"\b(?:let me (?:finish|explain|read|list|go through|spell|think|see|check)"
    r"|(?:i'm|i am) (?:going to|gonna) (?:read|list|spell|go through|tell you|give you)"
    r"|bear with me|hear me out)\b"
)


def announces_more(text: str) -> bool:
    """The caller says a long turn is coming."""
    return _ANNOUNCES_MORE.search(" ".join(_WORD.findall(text.lower()))) is not None


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
