"""Cut streamed LLM text into clauses the TTS can speak while the LLM goes on writing."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_CLAUSE_END = re.compile(r"[,;:—–]\s")
# Markdown and emoji mean nothing on a phone line; the TTS would read them out.
_UNSPEAKABLE = re.compile(r"[*_#`~>|\[\]{}<]|[\U0001F000-\U0001FAFF\u2600-\u27BF]")


def speakable(text: str) -> str:
    return re.sub(r"\s+", " ", _UNSPEAKABLE.sub("", text)).strip()


class ClauseSplitter:
    """Feed text deltas, get back whole clauses.

    The first clause may end at a comma once it has `first_min_words` words, so the caller
    hears the start of the reply early; later ones wait for a sentence end (or
    `max_words`), which sounds more natural.
    """

    def __init__(self, *, first_min_words: int = 2, max_words: int = 30) -> None:
        self._buffer = ""
        self._first_min_words = first_min_words
        self._max_words = max_words
        self._emitted = 0

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
        elif self._emitted == 0:
            for match in _CLAUSE_END.finditer(self._buffer):
                if len(self._buffer[: match.end()].split()) >= self._first_min_words:
                    cut = match.end()
                    break
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
        self._emitted += 1
        return clause
