"""Cut streamed LLM text into clauses the TTS can speak while the LLM goes on writing."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:—–]\s")
# A whole word: followed by whitespace, so "for" is not the start of "fortune".
_WHOLE_WORD = re.compile(r"\S+(?=\s)")
# Words that open a phrase: a long clause can be cut before one (a preposition, a
# conjunction) and still sound whole.
_PHRASE_OPENERS = frozenset(
    """
    with from to for and but or because so which that who at in on by if when while where
    until after before since than
    """.split()
)
# Markdown and emoji mean nothing on a phone line; the TTS would read them out.
_UNSPEAKABLE = re.compile(r"[*_#`~>|\[\]{}<]|[\U0001F000-\U0001FAFF\u2600-\u27BF]")


# Web and mail addresses: a caller can note a site's name, never its path, and the TTS
# spells a path out character by character. SmolLM2 writes them into one clause (a
# site with a five-part path), 9 s of speech the TTS made slower than the clause before
# it played: the caller heard gaps. Spoken as the host's name, its dots said "dot".
_TLDS = (
    "com|org|net|edu|gov|io|co|uk|us|ca|au|de|fr|info|biz|app|ai|me|tv"
    "|nz|br|jp|es|nl|eu|ie|za|mx|ch|se"
)
# Lower-case top-level domains only ("Done.Next" is a missing space), up to 8 labels
# of at most 63 characters each: bounded, so a long run of dotted text costs linear time.
_HOST = rf"((?:[A-Za-z0-9-]{{1,63}}\.){{1,8}}(?:{_TLDS}))(?![\w-]|\.[A-Za-z0-9])"
_PATH = r"(?::\d{1,5})?(?:[/?#][^\s()]*[^\s().,!?;:'\"])?/?"
_URL = re.compile(rf"(?:\bhttps?://)?(?:\bwww\.)?\b{_HOST}{_PATH}")
_EMAIL = re.compile(rf"\b([\w.+-]{{1,64}})@{_HOST}")
# A link's address in brackets right after its text or after itself (markdown's
# "[text](url)", "url(url)"): said once. Words, then the address in brackets, keep it.
_LINK_IN_PARENTHESES = re.compile(rf"(?<=[\]\w/])\(\s*(?:https?://)?(?:www\.)?{_HOST}{_PATH}\s*\)")


def _spoken_host(host: str) -> str:
    return " dot ".join(host.removeprefix("www.").split("."))


def speakable(text: str) -> str:
    text = _LINK_IN_PARENTHESES.sub("", text)
    text = _EMAIL.sub(lambda m: f"{m.group(1)} at {_spoken_host(m.group(2))}", text)
    text = _URL.sub(lambda m: _spoken_host(m.group(1)), text)
    text = re.sub(r"\s+", " ", _UNSPEAKABLE.sub("", text)).strip()
    # Punctuation alone ("—", "...") is no clause: the TTS makes no sound of it, and a
    # reply of nothing else is a reply with nothing to say.
    return text if any(ch.isalnum() for ch in text) else ""


class ClauseSplitter:
    """Feed text deltas, get back whole clauses.

    Until `lead_words` words have gone out, little audio is queued ahead of the caller's
    ear, and waiting for a whole sentence from the LLM would leave them in silence (at the
    start of a reply) or in a gap (after a short opening sentence of two words). So
    until then a clause may end at a comma once it has `first_min_words` words, or before
    a phrase's opening word once it has `phrase_words`. Later ones wait for a sentence end
    (or `max_words`), which sounds more natural.
    """

    def __init__(
        self,
        *,
        first_min_words: int = 2,
        phrase_words: int = 5,
        lead_words: int = 12,
        max_words: int = 30,
    ) -> None:
        self._buffer = ""
        self._first_min_words = first_min_words
        self._phrase_words = phrase_words
        self._lead_words = lead_words
        self._max_words = max_words
        self._emitted_words = 0

    def feed(self, delta: str) -> list[str]:
        self._buffer += delta
        clauses = []
        while (clause := self._next_clause()) is not None:
            clauses.append(clause)
        return clauses

    def flush(self) -> list[str]:
        rest, self._buffer = speakable(self._buffer), ""
        return [rest] if rest else []

    def _next_clause(self) -> str | None:
        cut = None
        if match := _SENTENCE_END.search(self._buffer):
            cut = match.end()
        elif self._emitted_words < self._lead_words:
            cut = self._early_cut()
        if cut is None and len(self._buffer.split()) > self._max_words:
            # Cut after exactly max_words words, however large the delta was.
            words = re.finditer(r"\S+\s+", self._buffer)
            for count, word in enumerate(words, start=1):
                if count == self._max_words:
                    cut = word.end()
                    break
        if cut is None:
            return None
        clause, self._buffer = speakable(self._buffer[:cut]), self._buffer[cut:]
        if not clause:
            return self._next_clause()
        self._emitted_words += len(clause.split())
        return clause

    def _early_cut(self) -> int | None:
        """Where a clause may end while the reply's lead is thin: a comma, else a phrase."""
        for match in _CLAUSE_END.finditer(self._buffer):
            if len(self._buffer[: match.end()].split()) >= self._first_min_words:
                return match.end()
        for count, word in enumerate(_WHOLE_WORD.finditer(self._buffer)):
            if count >= self._phrase_words and word.group().lower() in _PHRASE_OPENERS:
                return word.start()
        return None
