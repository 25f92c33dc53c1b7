"""Loading the cascade's models once per process: for `offhook serve` and `offhook worker`.

The files come from the verified model cache (agents.assets); what to load and how is
read from any object with the attributes of `agents.config.ModelSettings`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import numpy as np

from agents.assets import STT_ASSETS, ModelCache
from agents.cascade.draft import DraftBoard
from agents.cascade.hosted_stt import HostedTranscriber
from agents.cascade.hosted_words_judge import HostedJudgeError, HostedWordsJudge
from agents.cascade.llm import ChatPool, Message, OpenAIChat
from agents.cascade.llm_health import EmbeddedLlmSupervisor, HostedLlmWatch, LlmHealth
from agents.cascade.llm_server import EmbeddedLlamaServer, free_local_port
from agents.cascade.models import CascadeModels
from agents.cascade.stt import SpeechToText, WhisperTranscriber
from agents.cascade.tts import PiperSpeaker
from agents.cascade.turn_evaluator import EndOfTurn
from agents.cascade.words_judge import LlamaWordsJudge
from agents.config import ModelSettings, shown_url
from agents.errors import BackendUnavailable, SpeechToTextError
from agents.openmp import bound_openmp_spin
from agents.turns.config import FusedWeights, TurnTaking, fused_weights
from media.turn import EndOfTurnModel

log = logging.getLogger(__name__)


async def load_models(
    settings: ModelSettings, stack: AsyncExitStack, *, llm_servers: int | None = None
) -> CascadeModels:
    """Assemble, verify and load every model; start the embedded LLM if none is configured
    (`llm_servers` copies of it, or as many as the settings say).

    Cleanup of what was started is pushed onto `stack`, so the caller's lifespan closes it.
    """
    # Before anything loads libgomp (llama_cpp, ctranslate2), which reads it only then.
    bound_openmp_spin()
    cache = ModelCache(settings.model_cache_dir)
    threads = settings.model_threads

    stt_dir = Path(settings.stt_model)
    if settings.stt_model in STT_ASSETS and not settings.stt_url:
        stt_dir = await asyncio.to_thread(cache.path, STT_ASSETS[settings.stt_model])
    voice = Path(settings.tts_voice) if settings.tts_voice else None
    if voice is None:
        voice = await asyncio.to_thread(cache.path, "piper-joe-medium")
    turn_model = None
    if smart_turn_needed(settings.turn_judge, fused_weights(settings.turn_judge_weights)):
        turn_model = await asyncio.to_thread(cache.path, "smart-turn-v3.2")

    llm, health = await load_language_model(settings, stack, llm_servers or settings.llm_servers)
    words_judge: LlamaWordsJudge | HostedWordsJudge | None = None
    if settings.turn_judge == "words" and settings.turn_judge_url:
        words_judge = HostedWordsJudge(
            settings.turn_judge_url,
            model=settings.turn_judge_model,
            api_key=settings.turn_judge_api_key,
        )
        stack.callback(words_judge.close)
    elif settings.turn_judge == "words":
        gguf = await asyncio.to_thread(cache.path, "smollm2-135m-instruct")
        words_judge = await asyncio.to_thread(LlamaWordsJudge, gguf, threads=threads)
        stack.callback(words_judge.close)
    stt: SpeechToText
    if settings.stt_url:
        # A client, not a model: made here, and closed however the start ends.
        stt = hosted = speech_to_text(settings, stt_dir, threads)
        assert isinstance(hosted, HostedTranscriber)
        stack.callback(hosted.close)
        tts = await asyncio.to_thread(
            PiperSpeaker, voice, threads=threads, speed=settings.tts_speed
        )
    else:
        stt, tts = await asyncio.gather(
            asyncio.to_thread(speech_to_text, settings, stt_dir, threads),
            asyncio.to_thread(PiperSpeaker, voice, threads=threads, speed=settings.tts_speed),
        )
    # EndOfTurn is a Protocol: media's model (below agents) satisfies it by its shape.
    end_of_turn: EndOfTurn | None = None
    if turn_model is not None:
        end_of_turn = await asyncio.to_thread(EndOfTurnModel, turn_model, threads=1)
    # A server per call (the embedded default) lets every call draft its replies; one
    # the local workers write on too is not the calls' own.
    servers = len(llm.members) if isinstance(llm, ChatPool) else 1
    servers -= shared_servers(settings, servers)
    models = CascadeModels(
        stt=stt,
        tts=tts,
        llm=llm,
        end_of_turn=end_of_turn,
        drafts=DraftBoard(servers),
        llm_health=health,
        words_judge=words_judge,
    )
    for line in (settings.greeting, settings.apology, settings.reprompt, settings.farewell):
        if line:
            models.canned[line] = await asyncio.to_thread(tts.synthesize, line)
    await _warm_up(models, settings)
    return models


def speech_to_text(settings: ModelSettings, stt_dir: Path, threads: int) -> SpeechToText:
    """The callers' STT as configured: a hosted STT_URL's client, else the embedded
    Whisper in `stt_dir` (blocking: it loads a model); either reads STT_HOTWORDS."""
    if settings.stt_url:
        return HostedTranscriber(
            settings.stt_url,
            model=settings.stt_url_model,
            api_key=settings.stt_api_key,
            language=settings.stt_language,
            prompt=settings.stt_hotwords,
        )
    return WhisperTranscriber(
        stt_dir, threads=threads, language=settings.stt_language, hotwords=settings.stt_hotwords
    )


def smart_turn_needed(turn_judge: str, fused: FusedWeights | None = None) -> bool:
    """Whether a call's turn judge under `turn_judge` ever runs Smart Turn: the voice
    judge does; the fused judge only where its fitted weights (`fused`, the shipped ones
    by default) count it, even on turns the words judge cannot score. The shipped ones
    do not (agents/turns/config.py), so a process that never runs it does not load it."""
    return turn_judge != "words" or (fused or TurnTaking().fused).hears_the_voice


async def load_language_model(
    settings: ModelSettings, stack: AsyncExitStack, servers: int
) -> tuple[ChatPool, LlmHealth]:
    """The LLM as a pool of chat clients, with what says whether it can answer.

    Embedded servers must each write a completion before this returns (LlmStartError
    otherwise: the process cannot serve calls); a hosted one that does not answer yet
    only leaves the health not ready, and is asked again until it does.
    """
    cache = ModelCache(settings.model_cache_dir)
    tools = settings.llm_tools
    warm = warm_up_messages(settings)
    started: list[EmbeddedLlamaServer] = []
    if settings.llm_base_url:
        endpoints = [settings.llm_base_url]
        model, api_key = settings.llm_model, settings.llm_api_key
    else:
        gguf = Path(settings.llm_gguf) if settings.llm_gguf else None
        if gguf is None:
            gguf = await asyncio.to_thread(cache.path, "smollm2-135m-instruct")
        started = await _start_embedded_servers(gguf, settings, servers, stack, warm)
        endpoints = [server.base_url for server in started]
        model, api_key = started[0].model_name, settings.llm_embedded_api_key
        if tools == "auto" and not settings.llm_gguf:
            # The bundled 135M model does not call tools: intents come from the words.
            tools = "off"
    chats = [
        OpenAIChat(
            base_url=base_url,
            model=model,
            api_key=api_key,
            max_tokens=settings.llm_max_tokens,
            temperature=settings.llm_temperature,
            first_token_timeout_s=settings.llm_timeout_s,
            tools="on" if tools == "on" else "off" if tools == "off" else "auto",
        )
        for base_url in endpoints
    ]
    for chat in chats:
        stack.push_async_callback(chat.aclose)
    health: EmbeddedLlmSupervisor | HostedLlmWatch
    if started:
        health = EmbeddedLlmSupervisor(started, warm_messages=warm)
    else:
        health = HostedLlmWatch(chats[0], shown_url(endpoints[0]), probe_messages=warm)
        await health.check()  # run() says so loudly if it did not answer
    _in_background(stack, health.run(), "llm-health")
    pool = ChatPool(
        chats,
        shared=shared_servers(settings, len(chats)),
        health=health,
        wait_s=settings.llm_timeout_s,
    )
    return pool, health


def _in_background(stack: AsyncExitStack, work: Coroutine[None, None, None], name: str) -> None:
    """Run `work` until `stack` closes (the process's lifespan). Should it end by an
    error, the log says so at once (nothing else would: it is nobody's awaited task)."""
    task = asyncio.create_task(work, name=name)

    def ended(done: asyncio.Task[None]) -> None:
        if not done.cancelled() and done.exception() is not None:
            log.error("%s stopped: %r", name, done.exception(), exc_info=done.exception())

    task.add_done_callback(ended)

    async def cancel() -> None:
        task.cancel()
        await asyncio.wait({task})  # its error, if any, was logged when it ended

    stack.push_async_callback(cancel)


def warm_up_messages(settings: ModelSettings) -> list[Message]:
    """The same layout as a call's first turn: persona, greeting, caller. A server's
    start writes its reply, which also puts the persona in its prompt cache."""
    messages: list[Message] = [{"role": "system", "content": settings.persona()}]
    if settings.greeting:
        messages.append({"role": "assistant", "content": settings.greeting})
    messages.append({"role": "user", "content": "Hello?"})
    return messages


def shared_servers(settings: ModelSettings, count: int) -> int:
    """How many of `count` embedded servers other processes write on: those with a
    fixed port (LLM_EMBEDDED_PORT, then consecutive ones): `serve --local-workers`
    points each worker at one. Calls of this process sharing the first drafted there
    and held the workers' replies back: 4 calls in `python -m benchmarks pool`, 2 on workers,
    mouth to mouth p90 7.1 s."""
    if settings.llm_base_url or not settings.llm_embedded_port:
        return 0
    return min(settings.llm_embedded_shared, count)


def server_ports(settings: ModelSettings, count: int) -> list[int]:
    """The embedded servers' ports: the first fixed one (LLM_EMBEDDED_PORT) and the
    other shared ones after it; 0 (any free port) for the rest."""
    fixed = max(shared_servers(settings, count), 1 if settings.llm_embedded_port else 0)
    return [settings.llm_embedded_port + i if i < fixed else 0 for i in range(count)]


def fill_ports(ports: Sequence[int], pick: Callable[[], int] = free_local_port) -> list[int]:
    """`ports` with each 0 replaced by a free port none of the others has: the pinned
    ones are free but not bound until their servers start, and the kernel may hand
    one of them out again meanwhile."""
    taken = {port for port in ports if port}
    filled = []
    for port in ports:
        while not port:
            candidate = pick()
            if candidate not in taken:
                port = candidate
        taken.add(port)
        filled.append(port)
    return filled


async def _start_embedded_servers(
    gguf: Path,
    settings: ModelSettings,
    count: int,
    stack: AsyncExitStack,
    warm: Sequence[Message],
) -> list[EmbeddedLlamaServer]:
    """`count` copies of llama.cpp's server, each writing one reply at a time.

    The first, which a new lone call gets, has MODEL_THREADS threads; the others one
    each. llama.cpp's threads spin while they wait for each other, so 4 servers of 2
    threads on 2 cores took 1.3-14.5 s to a first clause with 4 calls asking at once;
    `python -m benchmarks llm` on 2 cores, first clause p50 / p90: 1 call 133-245 / 356-383 ms
    on 2 threads, 288 / 424 on 1; 4 calls at once 1168-1271 / 2117-2275 ms on one
    server, 359 / 508 on 4x1, 382-391 / 1071-1079 on 2+1+1+1.
    """
    threads = [settings.model_threads if index == 0 else 1 for index in range(count)]
    ports = fill_ports(server_ports(settings, count))
    servers = [
        EmbeddedLlamaServer(gguf, port=port, threads=n, api_key=settings.llm_embedded_api_key)
        for port, n in zip(ports, threads, strict=True)
    ]
    for server in servers:
        stack.push_async_callback(server.stop)
    await asyncio.gather(*(server.start(warm_messages=warm) for server in servers))
    return servers


async def _warm_up(models: CascadeModels, settings: ModelSettings) -> None:
    """First calls to each model are slow (allocation, caches): pay that before callers do.

    The LLM was warmed as it started (embedded) or checked (hosted), with the prompt of
    a call's first turn (`warm_up_messages`).
    """
    silence = np.zeros(16000, dtype=np.float32)
    if isinstance(models.stt, HostedTranscriber):
        # Its first answer may be slow (a connection, a model paged in): the start waits
        # longer than a turn would. Configured and unable to hear is a failed start, not
        # a server that asks every caller to repeat themselves.
        try:
            await asyncio.to_thread(partial(models.stt.transcribe, timeout_s=30.0), silence)
        except SpeechToTextError as exc:
            raise BackendUnavailable(f"the STT at STT_URL cannot transcribe: {exc}") from exc
    else:
        await asyncio.to_thread(models.stt.transcribe, silence)
    if models.end_of_turn is not None:
        await asyncio.to_thread(models.end_of_turn.predict, silence)
    if models.words_judge is not None:
        judge = models.words_judge
        # A hosted server's first answer may be slow (a connection to set up, a model
        # to page in): the start waits for it longer than a call's pause would.
        check = (
            partial(judge.complete, timeout_s=10.0)
            if isinstance(judge, HostedWordsJudge)
            else judge.complete
        )
        try:
            await asyncio.to_thread(check, settings.greeting, "Hello")
        except HostedJudgeError as exc:
            # Configured and unable to judge: a failed start, not a server whose every
            # turn falls back on the silence.
            raise HostedJudgeError(
                f"the words judge at TURN_JUDGE_URL cannot judge: {exc}"
            ) from exc
