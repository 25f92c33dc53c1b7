"""`bench judge --judge-url`: the words are judged by a server, as TURN_JUDGE_URL makes a
call's, so the refit it prints is the TURN_JUDGE_WEIGHTS for that judge.

The judge servers here answer in the legacy completions API's shape (OpenAI API
reference, "Completions": `logprobs` asks for the most likely next tokens, answered as
`choices[0].logprobs.top_logprobs`, one {token: log-probability} map per token), as
llama_cpp.server and vLLM do; agents/cascade/hosted_words_judge.py reads it. They stand
in for a larger model, which this machine cannot serve in a test's time.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest

from agents.assets import ModelCache
from agents.cascade.hosted_words_judge import HostedWordsJudge
from agents.cascade.words_judge import judged_words
from agents.turns.config import TurnTaking
from agents.turns.judge import FusedJudge, VoiceJudge
from app.settings import Settings
from benchmarks.judge import Listeners, Observation, fit, main, rejudge, wait_ms
from benchmarks.judge_material import corpus_pairs, draw
from tests.benchmarks.judge_observations import observation

Scorer = Callable[[str], float]  # the caller's words in the prompt -> P(turn is over)
SEEN_KEYS: list[str | None] = []  # the Authorization headers the servers were sent


def _answer(p_end: float) -> dict[str, object]:
    top = {".": math.log(p_end), " and": math.log(1 - p_end)}
    return {"choices": [{"text": ".", "logprobs": {"tokens": ["."], "top_logprobs": [top]}}]}


def _callers_words(prompt: str) -> str:
    return prompt.rsplit("<|im_start|>user\n", 1)[1]


@pytest.fixture
def judge_server() -> Iterator[Callable[[Scorer], str]]:
    """A completions server on loopback that scores the caller's words with a given rule.
    It answers only what the words judge must ask: one token of /v1/completions, with
    its alternatives (and 404 or 400 otherwise, as a real server would refuse)."""
    servers: list[ThreadingHTTPServer] = []

    def start(scorer: Scorer) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                SEEN_KEYS.append(self.headers.get("Authorization"))
                if self.path != "/v1/completions":
                    self.send_error(404)
                    return
                if body.get("max_tokens") != 1 or int(body.get("logprobs", 0)) < 5:
                    self.send_error(400)
                    return
                payload = json.dumps(_answer(scorer(_callers_words(body["prompt"])))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _saved_run(path: Path, seed: int, count: int) -> list[Observation]:
    """A run's JSON as `--json` writes it, heard perfectly: at each pause the words
    before it, at each end the whole line; the embedded judge's scores all 0.5."""
    items = draw(np.random.default_rng(seed), count, corpus_pairs())
    observations = []
    for index, item in enumerate(items):
        said = item.caller.split()
        for final, text in ((False, " ".join(said[: item.cut])), (True, item.caller)):
            pause_ms = 0.0 if final else item.pause_s * 1000
            observations.append(
                observation(item=index, final=final, pause_ms=pause_ms, text=text, speech_s=2.0)
            )
    saved = {
        "seed": seed,
        "provenance": {"options": {"stt": "tiny.en"}},
        "items": [asdict(i) for i in items],
        "observations": [asdict(o) for o in observations],
    }
    path.write_text(json.dumps(saved))
    return observations


def test_a_saved_runs_words_are_judged_again_by_a_server_and_the_refit_is_its_own(
    tmp_path: Path, judge_server: Callable[[Scorer], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURN_JUDGE_API_KEY", "judge-key")
    SEEN_KEYS.clear()
    saved = tmp_path / "run.json"
    heard = _saved_run(saved, seed=4242, count=40)
    whole = {judged_words(o.text) for o in heard if o.final}
    # A judge that knows every whole line: sure at each end, sure it goes on at a pause.
    url = judge_server(lambda words: 0.97 if words in whole else 0.01)
    out = tmp_path / "rejudged.json"

    assert main(["--from-json", str(saved), "--judge-url", url, "--json", str(out)]) == 0

    result = json.loads(out.read_text())
    assert result["words_judged_by"].endswith(url.removeprefix("http://"))
    assert SEEN_KEYS and set(SEEN_KEYS) == {"Bearer judge-key"}  # TURN_JUDGE_API_KEY's
    assert result["words_unscored"] == 0
    words = {(o["item"], o["final"]): o["words"] for o in result["observations"]}
    assert all(words[(o.item, o.final)] == pytest.approx(0.97 if o.final else 0.01) for o in heard)
    # The hearing is the saved run's: only the words' scores changed.
    assert [o["text"] for o in result["observations"]] == [o.text for o in heard]
    refitted = result["rows"]["fused, refitted / held-out"]
    assert refitted["cut_offs"] == 0 and refitted["wait_p90_ms"] <= 400


def test_the_listeners_ask_a_judge_server_and_load_no_embedded_judge() -> None:
    prompts: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        prompts.append(json.loads(request.content)["prompt"])
        return httpx.Response(200, json=_answer(0.8))

    cache = ModelCache(Settings.from_env({}).model_cache_dir)
    hosted = HostedWordsJudge("http://judge.invalid/v1", transport=httpx.MockTransport(server))
    listeners = Listeners.load(
        cache.path("whisper-tiny.en"),
        cache.path("smart-turn-v3.2"),
        Path("/nonexistent/judge.gguf"),  # not loaded: the server judges
        hosted_judge=hosted,
    )
    try:
        silence = np.zeros(16000, np.int16)
        seen = listeners.observe(
            "Hello?", silence, silence.size, [], item=0, final=True, pause_ms=0
        )
        assert seen.words == 0.0 and prompts == []  # no words heard: nothing to ask
        rejudged = rejudge(
            [replace(draw(np.random.default_rng(1), 1, corpus_pairs())[0], bot="Hello?")],
            [replace(seen, text="I need a taxi to the station")],
            hosted,
        )
        assert rejudged[0].words == pytest.approx(0.8)
        assert prompts[-1].endswith("<|im_start|>user\nI need a taxi to the station")
    finally:
        listeners.close()


def test_a_check_the_server_cannot_answer_is_no_score_and_waits_as_a_call_would() -> None:
    hosted = HostedWordsJudge(
        "http://judge.invalid/v1",
        transport=httpx.MockTransport(lambda _: httpx.Response(503, text="overloaded")),
    )
    [saved] = _observations_of_one_line()
    [unscored] = rejudge(draw(np.random.default_rng(2), 1, corpus_pairs()), [saved], hosted)
    assert unscored.words is None
    config = TurnTaking()
    # A call's fused judge waits on the voice and the silence for words it has no score of.
    assert wait_ms(FusedJudge(config), unscored) == wait_ms(VoiceJudge(config), unscored)
    # ...and the refit counts them as words not heard, not as a score of zero: it fits
    # the same weights as on the same material with those words unheard.
    scored = [replace(saved, item=i, words=0.02 + 0.01 * i) for i in range(8)]
    scored += [replace(o, final=True, pause_ms=0.0, words=0.9 - 0.05 * o.item) for o in scored]
    mix = [*scored, unscored, replace(unscored, final=True, pause_ms=0.0)]
    unheard = [replace(o, hearing="unclear") if o.words is None else o for o in mix]
    assert fit(mix, 900.0) == fit(unheard, 900.0)
    as_zero = [replace(o, words=0.0) if o.words is None else o for o in mix]
    assert fit(mix, 900.0) != fit(as_zero, 900.0)


def test_a_judge_server_that_cannot_judge_ends_the_run_before_any_material_is_made() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:s3cret@127.0.0.1:{port}/v1?key=k3y"
    with pytest.raises(SystemExit) as ended:
        main(["--items", "2", "--judge-url", url])
    message = str(ended.value)
    assert f"words judge at http://***@127.0.0.1:{port}/v1?*** cannot judge" in message
    assert "s3cret" not in message and "k3y" not in message


def _observations_of_one_line() -> list[Observation]:
    return [observation(smart_turn=0.3, avg_logprob=-0.3)]
