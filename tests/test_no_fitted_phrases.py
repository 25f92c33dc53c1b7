"""The turn-taking and hearing code quotes no caller speech from our tests or benchmarks.

A rule explained by the benchmark sentence it was written for is a rule fitted to that
sentence (issue 29: "No phrase from any benchmark or test may appear in product code").
So no quoted example in a comment or docstring of the code that hears callers and
decides whose turn it is may share three words running with a string anywhere in
tests/ or benchmarks/. Examples there describe the kind of case, not our material.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The code that hears the caller and takes turns.
CHECKED = ("agents/turns", "agents/cascade", "media")
MATERIAL = ("tests", "benchmarks")
RUN = 3  # words running

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_QUOTED = re.compile(r'"([^"\n]{2,}?)"|“([^”\n]{2,}?)”')


def runs(text: str) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + RUN]) for i in range(len(words) - RUN + 1)}


def quoted_in_prose(source: str) -> list[tuple[int, str]]:
    """(line, quoted span) for every quotation inside a comment or a docstring."""
    found: list[tuple[int, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            prose = token.string
        elif token.type == tokenize.STRING and token.string.endswith(('"""', "'''")):
            prose = token.string[3:-3]
        else:
            continue
        for match in _QUOTED.finditer(prose):
            found.append((token.start[0], match.group(1) or match.group(2)))
    return found


def material_runs(folders: tuple[str, ...] = MATERIAL) -> set[tuple[str, ...]]:
    """Three-word runs of every string written in the test and benchmark code."""
    seen: set[tuple[str, ...]] = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    seen |= runs(node.value)
    return seen


def fitted_quotes(source: str, material: set[tuple[str, ...]]) -> list[str]:
    return [
        f"{line}: {quote!r}" for line, quote in quoted_in_prose(source) if runs(quote) & material
    ]


def test_a_quote_of_test_material_in_a_comment_is_found() -> None:
    material = runs("Could you check whether the shop is open?")
    source = '# Whisper heard "check whether the shop" as a question.\nx = 1\n'
    assert fitted_quotes(source, material) == ["1: 'check whether the shop'"]


def test_a_quote_in_a_docstring_is_found_and_code_strings_are_not_prose() -> None:
    material = runs("my order number is")
    source = (
        'def f():\n    """Callers say "my order number" and pause."""\n'
        '    return "my order number"\n'
    )
    assert fitted_quotes(source, material) == ["2: 'my order number'"]


def test_generic_words_shared_with_the_material_are_not_a_quote() -> None:
    material = runs("the end of the turn")
    source = "# Waits for the end of the turn (no quotation marks).\n"
    assert fitted_quotes(source, material) == []


def test_the_turn_taking_and_hearing_code_quotes_no_test_or_benchmark_speech() -> None:
    material = material_runs()
    found = []
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for hit in fitted_quotes(path.read_text(encoding="utf-8"), material):
                found.append(f"{path.relative_to(ROOT)}:{hit}")
    assert not found, "quoted test or benchmark speech in product code:\n" + "\n".join(found)
