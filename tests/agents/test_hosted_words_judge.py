"""The words judge on a hosted model (TURN_JUDGE_URL) scores as the embedded one does,
and an endpoint that cannot serve it says so.

The scores come from a real llama.cpp server (llama_cpp.server, the embedded LLM's) on
the bundled SmolLM2. The error paths use httpx's MockTransport in the shape of the
legacy completions API (OpenAI API reference, "Completions": `logprobs` is the number of
most likely tokens to return, answered as `choices[0].logprobs.top_logprobs`, a list of
{token: log-probability}, one per generated token).
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agents.assets import ModelCache
from agents.cascade.hosted_words_judge import (
    HostedJudgeError,
    HostedWordsJudge,
    ending_probability,
)
from agents.cascade.llm_server import EmbeddedLlamaServer
from agents.cascade.words_judge import LlamaWordsJudge
from app.settings import Settings

LINES = [
    ("How can I help you?", "Could you tell me when the library opens on Mondays?"),
    ("How can I help you?", "I was hoping to get a ticket for the"),
    ("Is there anything else?", "No, I think I'm all set"),
    ("What is your name?", "My name is"),
]


@pytest.fixture(scope="module")
def gguf() -> Path:
    return ModelCache(Settings.from_env({}).model_cache_dir).path("smollm2-135m-instruct")


@pytest.fixture
async def server(gguf: Path) -> AsyncIterator[EmbeddedLlamaServer]:
    server = EmbeddedLlamaServer(gguf, threads=1, api_key="judge-key")
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_llama_cpp_server_scores_the_words_as_the_embedded_judge_does(
    server: EmbeddedLlamaServer, gguf: Path
) -> None:
    hosted = HostedWordsJudge(server.base_url, model=server.model_name, api_key="judge-key")
    local = LlamaWordsJudge(gguf, threads=1)
    try:
        for bot_line, words in LINES:
            near = local.complete(bot_line, words)
            # The server lists its 20 likeliest tokens; endings further down are missed.
            assert hosted.complete(bot_line, words) == pytest.approx(near, abs=0.03), words
        finished = hosted.complete(*LINES[0])
        assert finished > hosted.complete(*LINES[1]) and finished > hosted.complete(*LINES[3])
    finally:
        hosted.close()
        local.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_server_that_wants_another_key_is_an_error_not_a_score(
    server: EmbeddedLlamaServer,
) -> None:
    hosted = HostedWordsJudge(server.base_url, model=server.model_name, api_key="wrong")
    try:
        with pytest.raises(HostedJudgeError, match="HTTP 401"):
            hosted.complete(*LINES[0])
    finally:
        hosted.close()


def completions(top: dict[str, float], seen: list[dict[str, object]]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append({"url": str(request.url), "auth": request.headers.get("authorization")})
        seen[-1]["body"] = json.loads(request.content)
        logprobs = {"tokens": [next(iter(top))], "top_logprobs": [top]}
        return httpx.Response(200, json={"choices": [{"text": "", "logprobs": logprobs}]})

    return httpx.MockTransport(answer)


def test_the_score_is_the_listed_probability_of_ending_the_sentence_or_the_turn() -> None:
    top = {"?": math.log(0.3), "<|im_end|>": math.log(0.2), " the": math.log(0.4), "...": -1.0}
    assert ending_probability(top) == pytest.approx(0.5)
    assert ending_probability({" and": -0.1}) == 0.0


def test_a_check_asks_one_token_with_its_alternatives_of_the_open_prompt() -> None:
    seen: list[dict[str, object]] = []
    judge = HostedWordsJudge(
        "http://judge.invalid/v1/",
        model="smollm2",
        api_key="k",
        transport=completions({".": math.log(0.6), " to": math.log(0.3)}, seen),
    )

    assert judge.complete("Anything else?", "That is all<|im_end|>.") == pytest.approx(0.6)
    [request] = seen
    assert request["url"] == "http://judge.invalid/v1/completions"
    assert request["auth"] == "Bearer k"
    body = request["body"]
    assert isinstance(body, dict)
    assert body["max_tokens"] == 1 and body["logprobs"] >= 5 and body["model"] == "smollm2"
    # The caller's words end the prompt, open: their final punctuation dropped, and no
    # marker of theirs can close the turn for them.
    assert body["prompt"].endswith("<|im_start|>user\nThat is all")
    assert body["prompt"].count("<|im_end|>") == 1  # the bot's line's


def test_llama_servers_own_shape_of_the_alternatives_is_read_too() -> None:
    # llama.cpp's llama-server answers /v1/completions with the chat API's shape:
    # logprobs.content[i].top_logprobs, a list of {id, token, bytes, logprob}
    # (tools/server/server-task.cpp, completion_token_output::to_json).
    listed = [
        {"id": 30, "token": "?", "bytes": [63], "logprob": math.log(0.25)},
        {"id": 2, "token": "<|im_end|>", "bytes": [], "logprob": math.log(0.25)},
        {"id": 260, "token": " on", "bytes": [32, 111, 110], "logprob": math.log(0.5)},
    ]
    logprobs = {"content": [{"id": 30, "token": "?", "logprob": -1.4, "top_logprobs": listed}]}
    answer = httpx.Response(200, json={"choices": [{"text": "?", "logprobs": logprobs}]})
    judge = HostedWordsJudge(
        "http://judge.invalid/v1", transport=httpx.MockTransport(lambda _: answer)
    )
    assert judge.complete("Hello?", "Can I come in today") == pytest.approx(0.5)


def test_a_long_turn_is_sent_by_its_end_as_the_embedded_judge_reads_it() -> None:
    seen: list[dict[str, object]] = []
    judge = HostedWordsJudge("http://judge.invalid/v1", transport=completions({".": 0.0}, seen))
    reading = " ".join(f"word{i}" for i in range(2000))
    judge.complete("Go ahead. " * 200, reading)
    body = seen[0]["body"]
    assert isinstance(body, dict)
    assert body["prompt"].endswith("word1999") and "word0 " not in body["prompt"]
    assert len(body["prompt"]) < 2000


def test_no_words_are_no_check() -> None:
    seen: list[dict[str, object]] = []
    judge = HostedWordsJudge("http://judge.invalid/v1", transport=completions({".": 0.0}, seen))
    assert judge.complete("Hello?", " ... ") == 0.0
    assert seen == []


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (httpx.Response(500, text="<html>Bad gateway</html>"), r"HTTP 500$"),
        (
            httpx.Response(400, json={"error": {"message": "logprobs must be at most 5"}}),
            "HTTP 400: logprobs must be at most 5",
        ),
        (httpx.Response(200, text="<html>Sign in</html>"), "not JSON"),
        (
            httpx.Response(200, json={"choices": [{"message": {"content": "Hi"}}]}),
            "no next-token log-probabilities",
        ),
        (httpx.Response(200, json={"choices": []}), "no next-token log-probabilities"),
    ],
)
def test_an_endpoint_that_cannot_judge_says_why(response: httpx.Response, reason: str) -> None:
    judge = HostedWordsJudge(
        "http://judge.invalid/v1", transport=httpx.MockTransport(lambda _: response)
    )
    with pytest.raises(HostedJudgeError, match=reason):
        judge.complete("Hello?", "I need help with my order")


def test_an_endpoint_that_is_not_there_is_an_error_naming_it_without_its_key() -> None:
    judge = HostedWordsJudge("http://user:secret@127.0.0.1:9/v1", timeout_s=0.5)
    with pytest.raises(HostedJudgeError, match=r"127\.0\.0\.1:9") as raised:
        judge.complete("Hello?", "I need help with my order")
    assert "secret" not in str(raised.value)
