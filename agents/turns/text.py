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

# Words a sentence does not end on ("what is it for?" ends on a question mark): someone
# who stops after one is still thinking. "Thank" is "thank | you": Whisper writes the
# first word of "Thank you, bye" alone as "Thank." when the caller pauses after it.
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
    alright aha ah oh i see got it gotcha true exactly indeed cool great nice wow
    """.split()
)
_BACKCHANNEL_PHRASES = frozenset({"i see", "got it", "all right", "uh huh", "mm hmm"})
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
        return True  # "Yeah, I | think so"; "So do I." is whole
    last = _WORD.findall(sentences(stripped)[-1].lower())
    return _clause_without_verb(last) or _subject_without_verb(last)


_LISTENER = frozenset("you your yours you're you'll you've you'd".split())


def addresses_the_listener(text: str) -> bool:
    """The words speak to the one listening ("can you...", "is your..."): a question
    of them is put to the bot, not read out or made up of a garble."""
    return any(word in _LISTENER for word in _WORD.findall(text.lower()))


def only_trails_off(text: str) -> bool:
    """Unfinished only by Whisper's ellipsis: the words before it could end a sentence
    ("Weather...", a one-word question said flat), unlike "a table for..." """
    stripped = text.strip()
    if not stripped.endswith(("...", "…")):
        return False
    words = stripped.rstrip(".… ")
    return bool(words) and not looks_unfinished(words)


# Words that open a clause needing a verb of its own: "whether the pharmacy | is open".
_SUBORDINATORS = frozenset(
    "whether if because unless until although though since while whereas".split()
)
# ...when the next word starts its subject ("if possible", "whether or not" need none).
_SUBJECT_STARTS = frozenset(
    "the a an my your our their his her its this these those i you we they he she it".split()
)
# Finite verbs a clause ends on, and the common ones in base form ("if they deliver").
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
    """Words ending inside a subordinate clause that has a subject and no verb yet:
    "Could you check whether the pharmacy on Main Street?" (Whisper's question mark at
    a 1 s pause before "is open on Sunday"; Smart Turn 0.985)."""
    at = max((i for i, word in enumerate(words) if word in _SUBORDINATORS), default=-1)
    clause = words[at + 1 :]
    if at <= 0 or len(clause) < 2 or clause[0] not in _SUBJECT_STARTS:
        return False
    return not any(_verb_like(word) for word in clause)


# A sentence that is only "my ..." and a noun or two is the subject of one to come:
# "My account number | is 4 7 2..." came back "My count number." under babble (Smart
# Turn 0.98) and was answered 200 ms into the caller's 1.2 s pause. Two words are a
# sentence of their own ("My pleasure.", "My bad."), and so is one with the number in
# it ("My account number 4729."); "My credit card." as an answer waits too (1.7 s, its
# reply drafted from 0.9 s).
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
# rise (flat callers, synthetic voices): "Can you tell me the hours on Friday."
_QUESTION_OPENERS = frozenset(
    """
    what when where who whom whose which why how can could would will do does did is are
    was were should shall may might have has am
    """.split()
)
_WH = frozenset("what when where who whom whose which why how".split())
# ...but a wh-word followed by its subject opens a statement: "What I need is a table."
_SUBJECTS = frozenset("i we you they he she it".split())


def asks_a_question(text: str) -> bool:
    """A finished question: a question mark, or a finished sentence of three words or more
    that opens like one ("Can you tell me the hours on Friday.")."""
    stripped = text.strip()
    if stripped.endswith("?"):
        return True
    if not sounds_finished(stripped):
        return False
    # The last sentence is the one that asks: "I'm calling about my order. Where is it."
    last = sentences(stripped)[-1]
    words = _WORD.findall(last.lower())
    if len(words) < 3 or words[0] not in _QUESTION_OPENERS:
        return False
    return not (words[0] in _WH and words[1] in _SUBJECTS)


# How a request opens: "Tell me...", "Explain...", "Please read it back to me."
_REQUEST_OPENERS = frozenset(
    """
    tell explain give show describe list read repeat send check find help recommend
    suggest book cancel remind spell confirm
    """.split()
)


def makes_a_request(text: str) -> bool:
    """A whole turn that is one finished request: "Tell me a story about a lighthouse."

    A request wants an answer as much as a question does, and Smart Turn scores it as low
    on a flat voice. Only a turn of one sentence counts: a request read out inside a
    longer text ("...Baker Street. Please ring the bell twice.") is not the end of it.
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


# A caller taking the floor before saying what they want: "No wait, | actually...".
_FLOOR_CLAIMS = re.compile(
    r"\b(?:wait|hold on|hang on|actually|one (?:sec|second|moment)|just a (?:sec|second|moment)"
    r"|let me|excuse me)\b"
)


# Thanks on their own lead on: "Thanks, | that's all. Bye!", "Thank you, | one more thing".
_THANKS = re.compile(r"^(?:(?:thanks|thank you|cheers)(?: (?:so|very) much| a lot)?\s*)+$")
# A hedge on its own opens a sentence; no one answers with it ("I guess." can be one).
# Whisper made "I think." of "Thanks," (echo line, Smart Turn 0.66) and the bot spoke
# into "| that's all. Bye!".
_OPENERS = re.compile(r"^(?:(?:oh|well|so|um|uh) )*(?:i think|i mean|you know|well|so)$")
# "That's all" closes what the caller wanted, and the goodbye mostly follows after a
# sentence's pause: "Thanks, that's all. | Bye!" (Smart Turn 0.63 on the echo line) was
# answered 200 ms into it, and the bot spoke over "Bye!".
_CLOSINGS = re.compile(
    r"^(?:(?:thanks|thank you|okay|ok|no|well|so)\s+)*(?:that's|that is) (?:all|it|everything)$"
)

# An acknowledgement on its own mostly leads on too: "Great, | thanks a lot. Goodbye!"
# came back "Great." (Smart Turn 0.98, babble line) and was answered 200 ms into the
# comma's pause, over "thanks a lot". A lone "Great." waits a statement's 700 ms.
_ACKNOWLEDGEMENTS = re.compile(
    r"^(?:(?:oh|okay|ok) )?(?:great|okay|ok|alright|all right|perfect|awesome|wonderful"
    r"|excellent|cool)$"
)


def claims_the_floor(text: str) -> bool:
    """Words that open a turn rather than make one: "No wait.", "Hold on.", "Actually.",
    thanks on their own ("Thanks.", before "that's all, bye"), hedges ("I think.") and
    "that's all" (before the goodbye).

    Whisper closes them with a full stop at the comma pause after them, and Smart Turn
    is sure of them (0.98 on "No wait.", 0.96 on "Thanks." in bench turns): answered as
    short answers, the bot spoke over "actually I meant Saturday" and "that's all, bye".
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
# their own sentence ("No wait, actually I meant Saturday" vs "| six people at noon").
_INTERRUPTION_OPENERS = re.compile(
    r"^(?:(?:oh|um|uh|er)\s+)*(?:no|nope|wait|stop|sorry|actually|hey|hello|pardon"
    r"|excuse me|hold on|hang on|one (?:sec|second|moment))(?![\w'-])"
)


def opens_an_interruption(text: str) -> bool:
    """Words over the bot that stop or correct it ("No wait,", "Sorry,", "Hold on")
    rather than carry on with the caller's own sentence."""
    joined = " ".join(_WORD.findall(text.lower()))
    return _INTERRUPTION_OPENERS.match(joined) is not None


# A caller saying that more is coming: "I'm going to read you my whole order, so please
# let me finish." Smart Turn scored that sentence 0.62 and the bot, sure of a finished
# statement, answered into the reader's 750 ms pause before "First, two large pizzas".
_ANNOUNCES_MORE = re.compile(
    r"\b(?:let me (?:finish|explain|read|list|go through|spell|think|see|check)"
    r"|(?:i'm|i am) (?:going to|gonna) (?:read|list|spell|go through|tell you|give you)"
    r"|bear with me|hear me out)\b"
)


def announces_more(text: str) -> bool:
    """The caller says a long turn is coming: "let me finish", "I'm going to read you..."."""
    return _ANNOUNCES_MORE.search(" ".join(_WORD.findall(text.lower()))) is not None


def is_backchannel(text: str) -> bool:
    """Only listener noises ("mhm", "okay", "right", "yeah, yeah", "uh-huh")."""
    # Whisper spells hums out: "M-H-M", "Mm-hmm", "uh-huh", "M.H.M".
    words = [w.replace("-", "") for w in _WORD.findall(text.lower().replace(".", "-"))]
    if not words or len(words) > 4:
        return False
    joined = " ".join(words)
    if joined in _BACKCHANNEL_PHRASES:
        return True
    return all(word in _BACKCHANNELS for word in words)


# A caller closing the call: "bye", "goodbye", "thanks, bye", "that's all, goodbye".
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
# Not "yes", "yeah", "sure": "Yes, see you then." answers "Shall I book it?", and a
# goodbye line in its place would lose the booking.


def is_farewell(text: str) -> bool:
    """The caller is saying goodbye (and asking nothing more)."""
    lowered = text.lower().strip()
    if not lowered or "?" in lowered:
        return False
    if not _FAREWELL.search(lowered):
        return False
    # Everything else they said is politeness: "thank you so much, bye!", not "bye, but
    # first tell me the hours".
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
    """Short words over the bot that stop it: "stop", "wait", "no, Saturday", a question,
    or a sentence of three words or more lasting 800 ms.

    Anything else that short is taken for a hum or a noise: Whisper writes a hummed
    "mhm" as "M-A-M", "and make him" or "in a game" (measured on espeak and Piper: up
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


# A caller asking for a human: "can I talk to a real person", "transfer me", "operator".
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
