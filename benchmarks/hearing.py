"""`python -m benchmarks hearing` and `python -m benchmarks stt`: does the bot hear the
caller, and only the caller, on the lines real callers bring?

`hearing` places real calls through the Twilio protocol (ops.simulate) against the bot,
one per line condition, with a Piper-voiced caller asking three questions. Everything is
judged against the script, which the bench wrote and the server never sees:

- caller turns detected: a spoken question that the call's record has a caller turn for
  (overlapping its speech); precision: recorded caller turns that match a question;
- own-echo turns: recorded caller turns that match no question (the bot hearing itself
  or the room); spurious self-clears: `clear`s the simulated Twilio received while the
  caller was not speaking;
- WER of each question against what the record says the caller said;
- end of turn: the record's end-of-turn decision after the question's last sample;
- answered, and mouth to mouth at the caller's ear.

`stt` is the offline study behind the front end's defaults: the same line conditions
built sample-exactly, the front end run with RNNoise and the echo canceller on and off,
and Whisper tiny.en / base, 10 s / 30 s window, greedy / beam 5 on each question's audio
as the STT sees it (front-end output, with the agent's 300 ms of preroll).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.measure import BENCH_TOKEN, machine, percentile
from callevents import EndOfTurn, parse_timeline
from ops.caller_voice import CallerVoice
from ops.line import EchoPath, LineConditions, NoiseSource, active_rms
from ops.simulate import CallerTurn, CallReport, SimulationConfig, simulate_call

if TYPE_CHECKING:
    from agents.cascade.stt import WhisperTranscriber

__all__ = ["CONDITIONS", "bench_hearing", "bench_stt", "wer"]

RATE = 8000
QUESTIONS = (
    "What time does the pharmacy close today?",
    "Can you recommend a good book to read?",
    "How do I reset my password?",
    "Where can I park near the station?",
    "I would like to book a table for two people tonight.",
    "Tell me a fun fact about cats.",
)
BOT_LINES = (
    "Hello! Thanks for calling. How can I help you today?",
    "Sure, I can help with that. Let me check the details for you right away.",
    "Of course. Is there anything else you would like to know about it?",
    "Thanks for waiting. I have the answer here, and it is good news for you.",
    "No problem at all. Let me know if there is anything else I can do.",
    "Great question. Most people ask me that, and the short answer is yes.",
    "Alright. I will make a note of it and get back to you very soon.",
)
# The conditions the issue names: clean; echo at two levels and three delays; three
# kinds of noise at three SNRs; echo and babble together.
CONDITIONS: tuple[LineConditions, ...] = (
    LineConditions(),
    *(
        LineConditions(echo_db=level, echo_delay_ms=delay)
        for level in (-20, -10)
        for delay in (60, 150, 300)
    ),
    *(
        LineConditions(noise=kind, snr_db=snr)
        for kind in ("babble", "pink", "white")
        for snr in (20, 15, 10)
    ),
    LineConditions(noise="babble", snr_db=15, echo_db=-10, echo_delay_ms=150),
)
PREROLL_MS = 300  # the agent hands the STT its utterance with this much before speech


# --- word error rate ----------------------------------------------------------------------

_NUMBERS = {"2": "two", "5": "five", "9": "nine"}


def _words(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))
    return [_NUMBERS.get(w, w) for w in words]


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: (substitutions + deletions + insertions) / reference words."""
    ref, hyp = _words(reference), _words(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / len(ref)


# --- the offline study ----------------------------------------------------------------------


@dataclass
class BuiltLine:
    """One call's caller line, sample-exact: what Twilio delivers, and what played."""

    line: np.ndarray  # int16, the caller's microphone (speech + echo + noise), mu-law'd later
    schedule: list[tuple[int, np.ndarray]]  # (start sample, int16 pcm) of each bot utterance
    spans: list[tuple[int, int, str]]  # caller questions: start, end, text


def build_line(
    condition: LineConditions,
    questions: list[np.ndarray],
    texts: list[str],
    bot: list[np.ndarray],
) -> BuiltLine:
    """Bot line, a question 700 ms after it ends, the next bot line 600 ms later, ..."""
    schedule, spans, at = [], [], 0
    for k, question in enumerate(questions):
        reply = bot[k % len(bot)]
        schedule.append((at, reply))
        at += reply.size + RATE * 700 // 1000
        spans.append((at, at + question.size, texts[k]))
        at += question.size + RATE * 600 // 1000
    last = bot[len(questions) % len(bot)]
    schedule.append((at, last))
    total = at + last.size + RATE
    voice = np.zeros(total, np.float32)
    heard = np.zeros(total, np.float32)
    for (start, end, _), question in zip(spans, questions, strict=True):
        voice[start:end] = question
    for start, pcm in schedule:
        heard[start : start + pcm.size] = pcm
    mic = voice.copy()
    if condition.echo_db is not None:
        path = EchoPath(condition.echo_db, condition.echo_delay_ms)
        echo = np.zeros(total, np.float32)
        for i in range(0, total, 160):
            path.feed(heard[i : i + 160])
            echo[i : i + 160] = path.take(min(160, total - i))
        mic += echo
    if condition.noise is not None:
        level = active_rms(np.concatenate(questions)) / 10 ** (condition.snr_db / 20)
        mic += NoiseSource(condition.noise, level, condition.seed).take(total)
    line = np.rint(np.clip(mic, -32768, 32767)).astype(np.int16)
    return BuiltLine(line=line, schedule=schedule, spans=spans)


def line_references(built: BuiltLine) -> list[np.ndarray]:
    """The echo reference for each 20 ms frame of the line, read as a call reads it.

    The bot's audio is scheduled on a `PlayoutClock` set up like a call's (agents/
    playback.py: sent `REFERENCE_LEAD_MS` before it plays, the latency learnt from mark
    echoes) and each frame's reference is read the clock's `reference_lead` ahead, so
    the echo canceller sees the same echo delay here as on a call.
    """
    from media.echo import REFERENCE_LEAD_MS
    from media.playout import PlayoutClock

    lead = RATE * REFERENCE_LEAD_MS // 1000
    clock = PlayoutClock(RATE, min_latency=lead, learn_latency=True)
    for k, (start, pcm) in enumerate(built.schedule):
        clock.sent(f"m{k}", pcm.size, "", k, now=start - lead, pcm=pcm.astype(np.int16))
    ahead = clock.reference_lead
    count = built.line.size // 160
    return [clock.render(i * 160 + ahead, i * 160 + 160 + ahead) for i in range(count)]


def run_front_end(
    built: BuiltLine, *, denoise: bool, echo_cancel: bool, gate_db: float = 5.0
) -> tuple[np.ndarray, float]:
    """The front end over a built line, fed like a call; returns 16 kHz output, µs/frame."""
    from media.codec import mulaw_encode
    from media.frontend import FrontEnd

    front = FrontEnd(denoise=denoise, echo_cancel=echo_cancel, gate_margin_db=gate_db)
    references = line_references(built)
    frames = [mulaw_encode(built.line[i * 160 : i * 160 + 160]) for i in range(len(references))]
    out = []
    started = time.process_time()
    for frame, reference in zip(frames, references, strict=True):
        out.append(front.process(frame, reference).audio)
    cpu_us = (time.process_time() - started) / max(1, len(frames)) * 1e6
    front.close()
    return np.concatenate(out), cpu_us


def turn_audio(audio_16k: np.ndarray, start: int, end: int) -> np.ndarray:
    """A question's audio as the agent hands it to the STT (8 kHz span, preroll)."""
    lo = max(0, 2 * start - 16 * PREROLL_MS)
    return audio_16k[lo : 2 * end + 16 * 250]


FRONT_ENDS = {  # name: (denoise, echo_cancel)
    "RNNoise + AEC": (True, True),
    "AEC": (False, True),
    "RNNoise": (True, False),
    "neither": (False, False),
}
STT_VARIANTS = {  # name: (model, min window s, beam)
    "tiny.en 10 s greedy": ("tiny.en", 10, 1),
    "tiny.en 30 s greedy": ("tiny.en", 30, 1),
    "tiny.en 10 s beam 5": ("tiny.en", 10, 5),
    "base 10 s greedy": ("base", 10, 1),
    "base 10 s beam 5": ("base", 10, 5),
}


def _transcriber(
    model: str, window: int, beam: int, cache: dict[tuple[str, int, int], WhisperTranscriber]
) -> WhisperTranscriber:
    from agents.assets import STT_ASSETS, ModelCache
    from agents.cascade.stt import WhisperTranscriber
    from app.settings import Settings

    key = (model, window, beam)
    if key not in cache:
        settings = Settings.from_env()
        folder = ModelCache(settings.model_cache_dir).path(STT_ASSETS[model])
        cache[key] = WhisperTranscriber(
            folder, threads=settings.model_threads, min_window_s=window, beam_size=beam
        )
    return cache[key]


def bench_stt(args: argparse.Namespace) -> dict[str, object]:
    conditions = [c for c in CONDITIONS if _in_study(c)] if not args.all else list(CONDITIONS)
    voice = CallerVoice("piper")
    texts = list(QUESTIONS[: args.questions])
    questions = [voice.speak(t).astype(np.float32) for t in texts]
    bot = [voice.speak(t).astype(np.float32) * np.float32(0.7) for t in BOT_LINES]
    stts: dict[tuple[str, int, int], WhisperTranscriber] = {}
    rows: list[dict[str, object]] = []
    for condition in conditions:
        built = build_line(condition, questions, texts, bot)
        row: dict[str, object] = {"condition": condition.label}
        outputs = {}
        for name, (denoise, echo_cancel) in FRONT_ENDS.items():
            # CPU is `python -m benchmarks frontend`'s job: here Whisper's threads share
            # the process.
            outputs[name], _ = run_front_end(built, denoise=denoise, echo_cancel=echo_cancel)
        # Every front end with the default STT; every STT with the chosen front end.
        jobs = [(fe, "tiny.en 10 s greedy") for fe in FRONT_ENDS]
        jobs += [(args.front_end, stt) for stt in STT_VARIANTS if stt != "tiny.en 10 s greedy"]
        for fe, stt_name in jobs:
            stt = _transcriber(*STT_VARIANTS[stt_name], stts)
            errors, took = [], []
            for start, end, text in built.spans:
                began = time.perf_counter()
                heard = stt.transcribe(turn_audio(outputs[fe], start, end)).text
                took.append((time.perf_counter() - began) * 1000)
                errors.append(wer(text, heard))
            row[f"wer {fe} | {stt_name}"] = round(100 * statistics.mean(errors), 1)
            row[f"stt_ms {fe} | {stt_name}"] = round(statistics.median(took))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"machine": machine(), "questions": len(texts), "rows": rows}


def _in_study(condition: LineConditions) -> bool:
    """The STT study's subset: every kind of line, one echo path per level."""
    return condition.echo_db is None or condition.echo_delay_ms == 150


# --- the real calls ----------------------------------------------------------------------


@dataclass
class ConditionResult:
    condition: str
    spoken: int = 0
    detected: int = 0
    recorded: int = 0
    matched_recorded: int = 0
    own_echo_turns: int = 0
    self_clears: int = 0
    answered: int = 0
    wers: list[float] = field(default_factory=list)
    end_of_turn_ms: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)

    def row(self) -> dict[str, object]:
        return {
            "condition": self.condition,
            "recall_pct": round(100 * self.detected / self.spoken, 1) if self.spoken else None,
            "precision_pct": (
                round(100 * self.matched_recorded / self.recorded, 1) if self.recorded else None
            ),
            "detected": f"{self.detected}/{self.spoken}",
            "own_echo_turns": self.own_echo_turns,
            "self_clears": self.self_clears,
            "answered": f"{self.answered}/{self.spoken}",
            "wer_pct": round(100 * statistics.mean(self.wers), 1) if self.wers else None,
            "end_of_turn_p50_ms": round(percentile(self.end_of_turn_ms, 50)),
            "mouth_to_mouth_p50_ms": round(percentile(self.latencies_ms, 50)),
        }


def score_call(result: ConditionResult, report: CallReport, record: Path, texts: list[str]) -> None:
    """Judge one call against its script (spans from the caller side, not the server)."""
    transcript = json.loads((record / "transcript.json").read_text())
    timeline = [json.loads(line) for line in (record / "timeline.jsonl").read_text().splitlines()]
    callers = [t for t in transcript["turns"] if t["speaker"] == "caller"]
    scripted = zip(report.turns, texts, strict=False)  # a call cut short says fewer
    spoken = [(t.speech_start_ms, t.speech_end_ms, text) for t, text in scripted]
    result.spoken += len(spoken)
    result.recorded += len(callers)
    slack = 500.0

    def overlaps(turn: dict[str, float], start: float, end: float) -> bool:
        return turn["start_ms"] <= end + slack and turn["end_ms"] >= start - slack

    for turn in callers:
        if any(overlaps(turn, s, e) for s, e, _ in spoken):
            result.matched_recorded += 1
        else:
            result.own_echo_turns += 1
    decisions = [
        t for t, event in parse_timeline(timeline) if isinstance(event, EndOfTurn) and t is not None
    ]
    for (start, end, text), said in zip(spoken, report.turns, strict=True):
        heard = [t["text"] for t in callers if overlaps(t, start, end)]
        if heard:
            result.detected += 1
        result.wers.append(wer(text, " ".join(heard)))
        after = [t - end for t in decisions if t >= end - slack]
        if after:
            result.end_of_turn_ms.append(min(after))
        if said.latency_ms is not None:
            result.answered += 1
            result.latencies_ms.append(said.latency_ms)
    for clear in report.clears:
        if not any(s - 200 <= clear <= e + 1500 for s, e, _ in spoken):
            result.self_clears += 1


def _closed(record: Path) -> bool:
    """The call's record is complete: its meta says how the call ended."""
    try:
        return bool(json.loads((record / "meta.json").read_text()).get("ended_with"))
    except (OSError, ValueError):
        return False


async def _hearing_calls(
    url: str, data_dir: Path, conditions: list[LineConditions], per_call: int
) -> list[dict[str, object]]:
    rows = []
    for index, condition in enumerate(conditions):
        offset = (index * per_call) % len(QUESTIONS)
        texts = [QUESTIONS[(offset + k) % len(QUESTIONS)] for k in range(per_call)]
        turns = [CallerTurn(text=t, after="bot_done", delay_ms=700) for t in texts]
        report = await simulate_call(
            SimulationConfig(
                base_url=url,
                auth_token=BENCH_TOKEN,
                turns=turns,
                line=condition,
                voice_engine="piper",
                hangup_after_ms=3000,
                patience_s=6.0,
            )
        )
        result = ConditionResult(condition.label)
        # The record is closed off the call's loop: give it a moment to land.
        record = data_dir / "calls" / report.call_sid
        for _ in range(100):
            if _closed(record):
                break
            await asyncio.sleep(0.1)
        score_call(result, report, record, texts)
        row = result.row()
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def bench_hearing(args: argparse.Namespace) -> dict[str, object]:
    from app.main import create_app
    from app.settings import Settings
    from ops.local_server import ServerThread, free_port

    conditions = list(CONDITIONS)
    if args.only:
        conditions = [c for c in conditions if args.only in c.label]
    settings = Settings.from_env()
    data_dir = Path(tempfile.mkdtemp(prefix="offhook-bench-hearing-"))
    servers = ServerThread()
    try:
        port = free_port()
        local = settings.replace(
            public_url=f"http://127.0.0.1:{port}",
            twilio_auth_token=BENCH_TOKEN,
            data_dir=str(data_dir),
        )
        app = create_app(local)
        url = servers.serve(app, port)

        async def wait_ready() -> None:
            await asyncio.wait_for(app.state.services.ready.wait(), 600)

        servers.run(wait_ready(), timeout=620)
        rows = asyncio.run(_hearing_calls(url, data_dir, conditions, args.questions))
    finally:
        servers.close()
    return {
        "machine": machine(),
        "settings": {
            "denoise": settings.denoise,
            "echo_cancellation": settings.echo_cancellation,
            "speech_gate_db": settings.speech_gate_db,
            "stt_model": settings.stt_model,
        },
        "rows": rows,
    }


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    hearing = sub.add_parser("hearing", help="calls in every line condition: who the bot hears")
    hearing.add_argument("--questions", type=int, default=3, help="caller questions per call")
    hearing.add_argument("--only", default="", help="conditions whose label contains this")
    stt = sub.add_parser("stt", help="offline: WER and CPU of the front-end and STT choices")
    stt.add_argument("--questions", type=int, default=6)
    stt.add_argument("--front-end", default="AEC", choices=tuple(FRONT_ENDS))
    stt.add_argument("--all", action="store_true", help="every condition, not the subset")
    hearing.set_defaults(run=bench_hearing)
    stt.set_defaults(run=bench_stt)
    return [hearing, stt]
