"""Callers heard by a hosted Whisper (STT_URL): the same words and evidence as the server's
own Whisper gives, and a server that cannot transcribe says why.

The server here is a real HTTP server (uvicorn) answering OpenAI's transcription API
(API reference, "Audio: Create transcription": multipart form data with `file`, `model`,
`language`, `temperature`, `response_format` and an optional `prompt`; answered with
`verbose_json`, "the transcription object (Verbose JSON)": `text`, and `segments` each
with `tokens`, `avg_logprob` and `no_speech_prob`) by running faster-whisper on the
bundled tiny.en, as faster-whisper servers do. The error paths use httpx's MockTransport
in that API's shape.
"""

from __future__ import annotations

import io
import socket
import threading
import wave
from collections.abc import Iterator
from contextlib import closing
from email.parser import BytesParser
from email.policy import default
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents.assets import STT_ASSETS, ModelCache
from agents.cascade.hosted_stt import HostedTranscriber, transcript_of, wav_bytes
from agents.cascade.stt import Hearing, assess
from agents.errors import SpeechToTextError
from app.settings import Settings, SettingsError
from media.resample import resample

RATE = 16000


def _read_wav(data: bytes) -> tuple[np.ndarray, int, int, int]:
    with wave.open(io.BytesIO(data)) as wav:
        frames = wav.readframes(wav.getnframes())
        return (
            np.frombuffer(frames, "<i2").astype(np.float32) / 32768.0,
            wav.getframerate(),
            wav.getnchannels(),
            wav.getsampwidth(),
        )


def verbose_json(text: str, segments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"task": "transcribe", "language": "english", "duration": 1.0, "text": text} | (
        {} if segments is None else {"segments": segments}
    )


def segment(text: str, tokens: int, avg_logprob: float, no_speech_prob: float) -> dict[str, Any]:
    return {
        "id": 0,
        "seek": 0,
        "start": 0.0,
        "end": 1.0,
        "text": text,
        "tokens": list(range(50364, 50364 + tokens)),
        "temperature": 0.0,
        "avg_logprob": avg_logprob,
        "compression_ratio": 1.0,
        "no_speech_prob": no_speech_prob,
    }


class Recorded:
    """What a MockTransport server was sent."""

    def __init__(self, answer: httpx.Response) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.answer


def form_of(request: httpx.Request) -> tuple[dict[str, str], bytes]:
    """The multipart form's fields and its file, parsed as a MIME message."""
    head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
    message = BytesParser(policy=default).parsebytes(head + request.content)
    fields: dict[str, str] = {}
    upload = b""
    for part in message.iter_parts():
        body = part.get_payload(decode=True)
        assert isinstance(body, bytes)
        if part.get_filename():
            upload = body
        else:
            fields[str(part.get_param("name", header="content-disposition"))] = body.decode()
    return fields, upload


def test_a_turn_is_sent_as_a_16_khz_wav_with_the_api_fields_and_key() -> None:
    server = Recorded(httpx.Response(200, json=verbose_json(" Hello there.")))
    stt = HostedTranscriber(
        "http://stt.invalid/v1/",
        model="Systran/faster-whisper-small.en",
        api_key="stt-key",
        language="en",
        transport=httpx.MockTransport(server),
    )
    audio = 0.25 * np.sin(np.arange(RATE) * 2 * np.pi * 300 / RATE).astype(np.float32)
    transcript = stt.transcribe(audio)

    (request,) = server.requests
    assert request.method == "POST"
    assert str(request.url) == "http://stt.invalid/v1/audio/transcriptions"
    assert request.headers["authorization"] == "Bearer stt-key"
    fields, upload = form_of(request)
    assert fields == {
        "model": "Systran/faster-whisper-small.en",
        "language": "en",
        "temperature": "0",
        "response_format": "verbose_json",
    }
    sent, rate, channels, width = _read_wav(upload)
    assert (rate, channels, width) == (RATE, 1, 2)
    assert np.abs(sent - audio).max() < 1e-3
    assert transcript.text == "Hello there."
    assert transcript.audio_s == pytest.approx(1.0)


def test_the_names_callers_may_say_go_as_the_apis_prompt() -> None:
    server = Recorded(httpx.Response(200, json=verbose_json(" Via Roma.")))
    stt = HostedTranscriber(
        "http://stt.invalid/v1",
        prompt=" Luigi's, Via Roma, calzone ",
        transport=httpx.MockTransport(server),
    )
    stt.transcribe(np.zeros(RATE, np.float32))

    fields, _ = form_of(server.requests[0])
    assert fields["prompt"] == "Luigi's, Via Roma, calzone"


def test_a_long_turn_is_sent_by_its_last_30_seconds_as_the_embedded_whisper_hears_it() -> None:
    server = Recorded(httpx.Response(200, json=verbose_json("words")))
    stt = HostedTranscriber("http://stt.invalid/v1", transport=httpx.MockTransport(server))
    audio = np.linspace(-0.5, 0.5, 45 * RATE, dtype=np.float32)
    stt.transcribe(audio)
    sent, *_ = _read_wav(form_of(server.requests[0])[1])
    assert sent.size == 30 * RATE
    assert sent[-1] == pytest.approx(audio[-1], abs=1e-3)


def test_the_evidence_is_the_first_segments_silence_and_the_segments_mean_confidence() -> None:
    payload = verbose_json(
        " I need a table. For four, please.",
        [segment(" I need a table.", 6, -0.2, 0.05), segment(" For four, please.", 2, -1.0, 0.4)],
    )
    transcript = transcript_of(payload, audio_s=2.0)
    assert transcript.text == "I need a table. For four, please."
    assert transcript.no_speech_prob == pytest.approx(0.05)
    assert transcript.avg_logprob == pytest.approx((6 * -0.2 + 2 * -1.0) / 8)


def test_an_answer_without_segments_is_words_without_evidence() -> None:
    transcript = transcript_of({"text": "Hello."}, audio_s=1.0)
    assert (transcript.text, transcript.no_speech_prob, transcript.avg_logprob) == (
        "Hello.",
        0.0,
        0.0,
    )
    assert assess(transcript, speech_ms=600) is Hearing.HEARD


def test_whispers_doubt_from_the_server_is_weighed_as_the_embedded_ones() -> None:
    invention = transcript_of(
        verbose_json(" Thank you.", [segment(" Thank you.", 3, -1.3, 0.85)]), audio_s=1.0
    )
    assert assess(invention, speech_ms=150) is Hearing.NOTHING
    assert assess(invention, speech_ms=900) is Hearing.UNCLEAR


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (httpx.Response(500, text="<html>Bad gateway</html>"), r"HTTP 500$"),
        (
            httpx.Response(400, json={"error": {"message": "response_format is not supported"}}),
            "HTTP 400: response_format is not supported",
        ),
        (httpx.Response(401, json={"error": "invalid api key"}), "HTTP 401: invalid api key"),
        (httpx.Response(200, text="<html>Sign in</html>"), "not JSON"),
        (httpx.Response(200, json={"segments": []}), "no transcription text"),
        (
            httpx.Response(200, json=verbose_json("Hi.", [{"text": "Hi.", "tokens": [1]}])),
            "lacks avg_logprob or no_speech_prob",
        ),
    ],
)
def test_a_server_that_cannot_transcribe_says_why(response: httpx.Response, reason: str) -> None:
    stt = HostedTranscriber(
        "http://stt.invalid/v1", transport=httpx.MockTransport(lambda _: response)
    )
    with pytest.raises(SpeechToTextError, match=reason):
        stt.transcribe(np.zeros(RATE, np.float32))


def test_a_server_that_is_not_there_is_an_error_naming_it_without_its_credentials() -> None:
    stt = HostedTranscriber("http://user:secret@127.0.0.1:9/v1", timeout_s=0.5)
    with pytest.raises(SpeechToTextError, match=r"127\.0\.0\.1:9") as raised:
        stt.transcribe(np.zeros(RATE, np.float32))
    assert "secret" not in str(raised.value)


def test_settings_name_a_hosted_stt_by_an_http_url_and_a_model() -> None:
    hosted = Settings.from_env({"STT_URL": "http://gpu-box:8000/v1"})
    assert (hosted.stt_url, hosted.stt_url_model) == ("http://gpu-box:8000/v1", "whisper-1")
    assert Settings.from_env({}).stt_url == ""
    with pytest.raises(SettingsError, match="STT_URL must start with http"):
        Settings.from_env({"STT_URL": "gpu-box:8000/v1"})
    with pytest.raises(SettingsError, match="STT_URL_MODEL"):
        Settings.from_env({"STT_URL": "http://gpu-box:8000/v1", "STT_URL_MODEL": ""})


# --- against a real server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def whisper_server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """A transcription server on faster-whisper and the bundled tiny.en; the forms it was
    sent are listed."""
    from faster_whisper import WhisperModel

    folder = ModelCache(Settings.from_env({}).model_cache_dir).path(STT_ASSETS["tiny.en"])
    model = WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=2)
    forms: list[dict[str, str]] = []

    async def transcriptions(request: Request) -> JSONResponse:
        async with request.form() as form:
            upload = form["file"]
            assert isinstance(upload, UploadFile)
            audio, rate, _, _ = _read_wav(await upload.read())
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
        forms.append(fields)
        if request.headers.get("authorization") != "Bearer stt-key":
            return JSONResponse({"error": {"message": "Incorrect API key"}}, status_code=401)
        segments, info = model.transcribe(
            resample(audio, rate, RATE),
            language=fields["language"],
            beam_size=1,
            temperature=float(fields["temperature"]),
            condition_on_previous_text=False,
            # As faster-whisper servers pass the API's `prompt` (speaches' transcription
            # route: `initial_prompt=prompt`).
            initial_prompt=fields.get("prompt") or None,
        )
        found = list(segments)
        return JSONResponse(
            {
                "task": "transcribe",
                "language": info.language,
                "duration": info.duration,
                "text": "".join(s.text for s in found),
                "segments": [
                    {
                        "id": s.id,
                        "seek": s.seek,
                        "start": s.start,
                        "end": s.end,
                        "text": s.text,
                        "tokens": s.tokens,
                        "temperature": s.temperature,
                        "avg_logprob": s.avg_logprob,
                        "compression_ratio": s.compression_ratio,
                        "no_speech_prob": s.no_speech_prob,
                    }
                    for s in found
                ],
            }
        )

    app = Starlette(routes=[Route("/v1/audio/transcriptions", transcriptions, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", forms
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_caller_on_a_phone_line_is_heard_by_a_whisper_server(
    whisper_server: tuple[str, list[dict[str, str]]], tmp_path: Path
) -> None:
    import subprocess

    from media.codec import mulaw_decode, mulaw_encode, pcm16_to_float
    from media.wav import read_wav

    url, forms = whisper_server
    path = tmp_path / "caller.wav"
    subprocess.run(
        [
            "espeak-ng",
            "-v",
            "en-us",
            "-s",
            "150",
            "-w",
            str(path),
            "Could you tell me the opening hours of the library",
        ],
        check=True,
    )
    samples, rate = read_wav(path)
    line = pcm16_to_float(mulaw_decode(mulaw_encode(resample(samples, rate, 8000))))
    audio = resample(line, 8000, RATE)

    with closing(HostedTranscriber(url, model="tiny.en", api_key="stt-key")) as stt:
        heard = stt.transcribe(audio)
        silence = stt.transcribe(np.zeros(RATE, np.float32))
    assert "library" in heard.text.lower(), heard
    assert -1.0 < heard.avg_logprob < 0.0 and heard.no_speech_prob < 0.5, heard
    assert assess(heard, speech_ms=2000) is Hearing.HEARD
    assert assess(silence, speech_ms=0) is Hearing.NOTHING
    assert forms[0]["model"] == "tiny.en" and forms[0]["response_format"] == "verbose_json"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_whisper_server_that_wants_another_key_is_an_error_not_words(
    whisper_server: tuple[str, list[dict[str, str]]],
) -> None:
    url, _ = whisper_server
    with (
        closing(HostedTranscriber(url, api_key="wrong")) as stt,
        pytest.raises(SpeechToTextError, match="HTTP 401: Incorrect API key"),
    ):
        stt.transcribe(np.zeros(RATE, np.float32))


def test_wav_bytes_clip_rather_than_wrap() -> None:
    sent, *_ = _read_wav(wav_bytes(np.array([2.0, -2.0, 0.5], np.float32)))
    assert sent.tolist() == pytest.approx([32767 / 32768, -32767 / 32768, 0.5], abs=1e-4)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_configured_names_reach_a_whisper_server_and_are_heard(
    whisper_server: tuple[str, list[dict[str, str]]],
) -> None:
    from agents.loading import speech_to_text
    from benchmarks.judge_material import to_16k
    from ops.caller_voice import CallerVoice

    url, forms = whisper_server
    said = to_16k(CallerVoice("espeak", 160, "en-us").speak("I live on Dunmore Street."))
    audio = np.concatenate([np.zeros(4800), said, np.zeros(1600)]).astype(np.float32)
    settings = Settings.from_env(
        {
            "STT_URL": url,
            "STT_URL_MODEL": "tiny.en",
            "STT_API_KEY": "stt-key",
            "STT_HOTWORDS": "Ragazzi, Okonkwo, Dunmore Street",
        }
    )
    stt = speech_to_text(settings, Path("unused"), threads=2)
    assert isinstance(stt, HostedTranscriber)
    with closing(stt):
        heard = stt.transcribe(audio)
    assert forms[-1]["prompt"] == "Ragazzi, Okonkwo, Dunmore Street"
    assert "Dunmore Street" in heard.text, heard
