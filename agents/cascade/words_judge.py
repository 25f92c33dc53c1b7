"""How likely the caller's words so far are a whole turn, read by a language model.

The idea behind LiveKit's turn detector, on the LLM we already ship: after the bot's last
line and the caller's words, ask the model what comes next. If it expects the sentence to
go on (" a", " the", "-"), the caller has more to say; if it expects the sentence to end
(".", "?", "!") or the turn to end (`<|im_end|>`), they may be done. The probability of
those endings is the score. Whisper's own final punctuation is dropped first: it is a
guess made from the same pause we are judging.

The model is the embedded SmolLM2 GGUF, loaded in-process (a separate context from the
LLM servers, which are busy writing replies and drafts exactly when a pause is judged).
The bot's line is a prefix the llama.cpp context keeps between checks, so a check
evaluates only the caller's words: tens of milliseconds for a short turn.

The only lexical knowledge is the closed class of sentence-final punctuation, read from
the model's own vocabulary.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = [
    "END_OF_TEXT_MARKERS",
    "LlamaWordsJudge",
    "WordsJudge",
    "ends_a_sentence",
    "judged_words",
    "turn_prompt",
]

# A token made only of sentence-final marks (with quotes, brackets or spaces around),
# not of dots alone beyond one: "..." after an open clause is trailing off, not an end.
_FINAL_TOKEN = re.compile(r"""^[\s"')\]]*(?:[.?!。？！]|[?!。？！][.?!。？！]+)[\s"')\]]*$""")
# The chat templates' end-of-turn and end-of-text markers (ChatML, Llama 2 and 3, GPT-2).
END_OF_TEXT_MARKERS = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>")
# Whisper's ending: its final marks, and a dangling comma or dash.
_TRAILING = re.compile(r"""[\s.?!,;:…\-–—"']+$""")


class WordsJudge(Protocol):
    def complete(self, bot_line: str, words: str) -> float:
        """P(the caller's turn is complete after `words`), given the bot's last line."""
        ...


def ends_a_sentence(piece: str) -> bool:
    """A token's text that ends a sentence: only sentence-final marks."""
    return bool(piece) and _FINAL_TOKEN.match(piece) is not None


def judged_words(text: str) -> str:
    """The transcript as the judge reads it: Whisper's final punctuation removed."""
    return _TRAILING.sub("", text.strip())


def turn_prompt(bot_line: str, words: str) -> str:
    """ChatML, as SmolLM2 (and most instruct models) were trained on, left open after the
    caller's words."""
    return "".join(text for text, _ in _prompt_parts(bot_line, words))


def _prompt_parts(bot_line: str, words: str) -> list[tuple[str, bool]]:
    """The prompt as (text, is_template) pieces: only the template's own markers may
    become control tokens, never a caller's or the bot's words."""
    parts: list[tuple[str, bool]] = []
    if bot_line.strip():
        parts += [("<|im_start|>assistant\n", True), (bot_line.strip(), False)]
        parts += [("<|im_end|>\n", True)]
    return [*parts, ("<|im_start|>user\n", True), (words, False)]


class LlamaWordsJudge:
    """The judge on an in-process llama.cpp model (the embedded GGUF)."""

    # The most of the bot's line and of the caller's words a check reads: their ends
    # matter, and the prompt must fit the context with the template around them.
    BOT_TOKENS = 96
    WORDS_TOKENS = 320

    def __init__(self, gguf: Path, *, threads: int = 1, n_ctx: int = 512) -> None:
        from llama_cpp import Llama  # imported here: loading this module stays cheap

        self._llama: Any = Llama(
            model_path=str(gguf),
            n_ctx=n_ctx,
            n_batch=n_ctx,
            # A check decodes a batch of tokens: without n_threads_batch llama.cpp would
            # take every core of the machine for it, against the calls' audio.
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        self._lock = threading.Lock()  # one context: one check at a time
        self._endings = np.array(sorted(self._ending_tokens()), dtype=np.int64)
        self.evaluated = 0  # tokens the last check decoded (the rest came from the cache)

    def close(self) -> None:
        with self._lock:
            self._llama.close()

    def _ending_tokens(self) -> set[int]:
        llama = self._llama
        endings = {int(llama.token_eos())}
        for special in END_OF_TEXT_MARKERS:
            ids = llama.tokenize(special.encode(), add_bos=False, special=True)
            if len(ids) == 1:
                endings.add(int(ids[0]))
        for token in range(llama.n_vocab()):
            piece = llama.detokenize([token]).decode("utf-8", errors="ignore")
            if ends_a_sentence(piece):
                endings.add(token)
        return endings

    def complete(self, bot_line: str, words: str) -> float:
        words = judged_words(words)
        if not words:
            return 0.0
        with self._lock:
            self._eval_from_cache(self._tokens(bot_line, words))
            logits = self._last_logits()
        top = float(logits.max())
        probs = np.exp(logits - top)
        total = float(probs.sum())
        if not (total > 0 and math.isfinite(total)):
            return 0.0
        return float(probs[self._endings].sum() / total)

    def _tokens(self, bot_line: str, words: str) -> list[int]:
        llama = self._llama
        tokens: list[int] = []
        parts = _prompt_parts(bot_line, words)
        for index, (text, template) in enumerate(parts):
            ids = llama.tokenize(text.encode(), add_bos=False, special=template)
            if not template:
                # A long line or turn: its end is what tells whether it is finished.
                ids = ids[-(self.WORDS_TOKENS if index == len(parts) - 1 else self.BOT_TOKENS) :]
            tokens += ids
        return tokens

    def _eval_from_cache(self, tokens: list[int]) -> None:
        """Evaluate `tokens`, reusing the context's longest common prefix with the last check."""
        llama = self._llama
        known = llama.input_ids[: llama.n_tokens].tolist()
        same = 0
        for a, b in zip(known, tokens, strict=False):
            if a != b:
                break
            same += 1
        same = min(same, len(tokens) - 1)  # at least one token, for fresh logits
        if same < llama.n_tokens:
            llama._ctx.kv_cache_seq_rm(-1, same, -1)
        llama.n_tokens = same
        llama.eval(tokens[same:])
        self.evaluated = len(tokens) - same

    def _last_logits(self) -> np.ndarray:
        import llama_cpp

        pointer = llama_cpp.llama_get_logits_ith(self._llama._ctx.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self._llama.n_vocab(),)).astype(np.float64)
