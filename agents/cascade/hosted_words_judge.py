"""The words judge on a hosted model (TURN_JUDGE_URL): the same question as
`LlamaWordsJudge` asks the embedded SmolLM2, put to an OpenAI-compatible server.

The server completes the open prompt by one token and returns the most likely next
tokens with their log-probabilities (the legacy `/completions` API's `logprobs`, which
llama.cpp's servers and vLLM serve). The score is the probability of those that end a
sentence or the turn. Only the top `TOP_LOGPROBS` are returned, so the rest of the
ending mass is missed: the score is a lower bound, close when the model is sure.

The prompt is ChatML (`turn_prompt`): the server's model must read ChatML, as SmolLM2
and Qwen do. Chat endpoints cannot do this: their log-probabilities are of the reply,
after the caller's turn has been closed for them.
"""

from __future__ import annotations

import math
import re
from typing import Any

import httpx

from agents.cascade.hosted_answers import posted_json
from agents.cascade.words_judge import (
    END_OF_TEXT_MARKERS,
    ends_a_sentence,
    judged_words,
    turn_prompt,
)
from agents.config import shown_url

__all__ = ["HostedJudgeError", "HostedWordsJudge"]

# As many alternatives as vLLM gives by default (OpenAI's own completions give 5).
TOP_LOGPROBS = 20
# The most of the bot's line and of the caller's words sent, from their ends: about the
# 96 and 320 tokens `LlamaWordsJudge` reads, so a long reading fits a small context.
BOT_CHARS = 400
WORDS_CHARS = 1300
# A template marker inside the words would be read as one by the server's tokenizer.
_MARKER = re.compile(r"<\|[^|<>]{1,40}\|>|</s>")


class HostedJudgeError(RuntimeError):
    """The endpoint gave no usable next-token probabilities."""


class HostedWordsJudge:
    def __init__(
        self,
        base_url: str,
        *,
        model: str = "",
        api_key: str = "",
        timeout_s: float = 1.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._url = base_url.rstrip("/") + "/completions"
        self._model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # A check must be back within the caller's pause; a slower one is no score, and
        # the turn is judged without it. (httpx times each phase: connecting, sending,
        # the answer.)
        self._client = httpx.Client(headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._client.close()

    def complete(self, bot_line: str, words: str, *, timeout_s: float | None = None) -> float:
        """P(the caller's turn is complete after `words`); `timeout_s` for a check that
        may take longer than one in a call's pause (the first, at start)."""
        words = _tail(judged_words(_MARKER.sub(" ", words)), WORDS_CHARS)
        if not words:
            return 0.0
        prompt = turn_prompt(_tail(_MARKER.sub(" ", bot_line), BOT_CHARS), words)
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": TOP_LOGPROBS,
        }
        if self._model:
            body["model"] = self._model
        where = shown_url(self._url)
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else timeout_s
        payload = posted_json(
            self._client, self._url, error=HostedJudgeError, where=where, json=body, timeout=timeout
        )
        return ending_probability(_top_logprobs(payload, where))


def _tail(text: str, chars: int) -> str:
    """The end of `text`, whole words, within `chars`: what tells whether it is finished
    (as the in-process judge reads the last 96 and 320 tokens)."""
    text = text.strip()
    if len(text) <= chars:
        return text
    cut = text[-chars:]
    return cut.split(" ", 1)[1] if " " in cut else cut


def ending_probability(top: dict[str, float]) -> float:
    """The probability of the next token ending the sentence or the turn, of those
    listed (token text -> log-probability)."""
    total = sum(
        math.exp(lp)
        for token, lp in top.items()
        if math.isfinite(lp) and (token in END_OF_TEXT_MARKERS or ends_a_sentence(token))
    )
    return min(1.0, total)


def _top_logprobs(payload: Any, where: str) -> dict[str, float]:
    """The first token's alternatives, from the legacy completions API's shape
    (`logprobs.top_logprobs[0]`, a {token: logprob} map: llama_cpp.server, vLLM) or
    llama.cpp llama-server's (`logprobs.content[0].top_logprobs`, a list of {token,
    logprob})."""
    try:
        logprobs = payload["choices"][0]["logprobs"]
        if "content" in logprobs:
            listed = logprobs["content"][0]["top_logprobs"]
            return {str(item["token"]): float(item["logprob"]) for item in listed}
        first = logprobs["top_logprobs"][0]
        return {str(token): float(lp) for token, lp in first.items()}
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise HostedJudgeError(
            f"{where} returned no next-token log-probabilities: the words judge needs a "
            "/completions endpoint that returns `logprobs` (a llama.cpp server, vLLM)"
        ) from exc
