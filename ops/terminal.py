"""Printing what strangers wrote: records hold callers' and Twilio's strings verbatim.

A `to` parameter or a transcript with ESC, CSI or bidi-override characters could
rewrite the operator's terminal (clear it, set its title, hide text). `Neutralise` is
a Rich render hook that shows every such character as a visible escape (\\x1b), after
Rich has laid out the text and before it adds its own styling codes.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Sequence

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderableType, RenderHook
from rich.segment import Segment

__all__ = ["Neutralise", "neutralise"]

_KEPT = frozenset("\n\t")


def _visible(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def neutralise(text: str) -> str:
    """`text` with control and format characters (C0, C1, bidi, zero-width) shown escaped."""
    if text.isprintable():
        return text
    return "".join(
        _visible(ch)
        if ch not in _KEPT and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn")
        else ch
        for ch in text
    )


class _Neutralised:
    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.renderable, options):
            if segment.control:  # Rich's own cursor and screen codes
                yield segment
            else:
                yield Segment(neutralise(segment.text), segment.style)


class Neutralise(RenderHook):
    """`console.push_render_hook(Neutralise())`: nothing printed can drive the terminal."""

    def process_renderables(
        self, renderables: Sequence[ConsoleRenderable | RenderableType]
    ) -> list[ConsoleRenderable]:
        return [_Neutralised(r) for r in renderables]
