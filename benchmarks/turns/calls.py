"""Placing the calls of `python -m benchmarks turns`: a plan of (line, script) calls on
one or more lanes of callers at once, against a running server or one started here."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Final

from benchmarks.measure import BENCH_TOKEN, machine
from benchmarks.provenance import fresh_seed
from benchmarks.turns.corpus import RECORDED_SHARE, corpus_scripts, halves
from benchmarks.turns.report import print_table, table_rows
from benchmarks.turns.said_stt import SAID_MODEL, WordsSaid, said_stt_app
from benchmarks.turns.scoring import Span, Tally, TurnScore, score_call, score_unplaced
from benchmarks.turns.script import LINES, SCRIPTS, PreparedScript, Script, Voices, prepare
from ops.caller_voice import CallerVoiceError
from ops.line import LineConditions
from ops.simulate import SimulationConfig, SimulationError, simulate_call

HANGUP_AFTER_MS: Final = 5500  # > scoring.ANSWER_WINDOW_MS: the last answer is heard
LANE_STAGGER_S: Final = 2.0
MAX_CALL_S: Final = 300.0


@dataclass
class CallOutcome:
    line: str
    script: str
    lane: int
    tally: Tally
    turns: list[TurnScore]
    call_sid: str | None = None
    error: str | None = None
    clears_ms: list[float] = field(default_factory=list)
    bot_utterances_ms: list[Span] = field(default_factory=list)


_print_lock = threading.Lock()


def _summary(outcome: CallOutcome) -> str:
    t = outcome.tally
    lat = ", ".join(f"{v:.0f}" for v in t.latencies_ms) or "-"
    text = (
        f"[{outcome.line}] {outcome.script} (lane {outcome.lane}): answered "
        f"{t.answered}/{t.expect_answer}, talk-over {t.talk_over}, cut-offs {t.cut_offs}, "
        f"false stops {t.false_stops}/{t.backchannels_judged}, "
        f"tails {[round(v) for v in t.tails_ms]}, dead air "
        f"{t.dead_air_turns + t.dead_air_in_replies}, underruns {t.underruns}, "
        f"mouth to mouth [{lat}] ms"
    )
    return text + (f" ERROR {outcome.error}" if outcome.error else "")


async def _place(
    url: str,
    token: str | None,
    prepared: PreparedScript,
    line_name: str,
    line: LineConditions,
    lane: int,
    record_dir: Path | None,
    said: WordsSaid | None = None,
) -> CallOutcome:
    on_turn_start: Callable[[int, float], None] | None = None
    if said is not None:
        said.new_call()
        facts = prepared.facts

        def on_turn_start(index: int, _ms: float) -> None:
            said.turn_started(facts[index].said)

    config = SimulationConfig(
        base_url=url,
        auth_token=token,
        turns=prepared.turns,
        line=line,
        hangup_after_ms=HANGUP_AFTER_MS,
        max_call_s=MAX_CALL_S,
        patience_s=prepared.script.patience_s,
        on_turn_start=on_turn_start,
        record_path=(
            None
            if record_dir is None
            else record_dir / f"{line_name}-{prepared.script.name}-lane{lane}.wav"
        ),
    )
    name = prepared.script.name
    try:
        report = await simulate_call(config)
    except (SimulationError, CallerVoiceError, OSError) as exc:
        tally, turns = score_unplaced(prepared.facts)
        return CallOutcome(line_name, name, lane, tally, turns, error=str(exc))
    tally, turns = score_call(prepared.facts, report)
    return CallOutcome(
        line_name,
        name,
        lane,
        tally,
        turns,
        call_sid=report.call_sid,
        clears_ms=[round(c) for c in report.clears],
        bot_utterances_ms=[(round(s), round(e)) for s, e in report.bot_utterances],
    )


Plan = list[tuple[str, LineConditions, PreparedScript]]


async def _lane(
    url: str,
    token: str | None,
    plan: Plan,
    lane: int,
    record_dir: Path | None,
    said: WordsSaid | None = None,
) -> list[CallOutcome]:
    await asyncio.sleep(lane * LANE_STAGGER_S)
    outcomes = []
    for line_name, line, prepared in plan:
        outcome = await _place(url, token, prepared, line_name, line, lane, record_dir, said)
        with _print_lock:
            print(_summary(outcome), flush=True)
        outcomes.append(outcome)
    return outcomes


def run_plan(
    url: str,
    token: str | None,
    plan: Plan,
    concurrent: int,
    record_dir: Path | None,
    said: WordsSaid | None = None,
) -> list[CallOutcome]:
    """Every call of the plan on each of `concurrent` lanes, lanes rotated and at once;
    with `said`, its calls' words are told to it as they are said (one lane only)."""
    if said is not None and concurrent != 1:
        raise ValueError("the words said are known on one call at a time")
    lanes = [
        plan[k * len(plan) // concurrent :] + plan[: k * len(plan) // concurrent]
        for k in range(concurrent)
    ]
    # A thread and an event loop per caller: one caller's work (babble synthesis at
    # dialling, mixing) never holds up another's 20 ms clock.
    with ThreadPoolExecutor(concurrent, thread_name_prefix="caller") as pool:
        futures = [
            pool.submit(asyncio.run, _lane(url, token, lane, k, record_dir, said))
            for k, lane in enumerate(lanes)
        ]
        return [outcome for future in futures for outcome in future.result()]


def _serve_and_run(
    args: argparse.Namespace, plan: Plan, record_dir: Path | None
) -> tuple[list[CallOutcome], dict[str, object]]:
    from app.main import create_app
    from app.settings import Settings
    from ops.local_server import ServerThread, free_port

    settings = Settings.from_env()
    keep: Path | None = args.keep_records
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    data_dir = keep or Path(tempfile.mkdtemp(prefix="offhook-bench-turns-"))
    servers = ServerThread()
    said = WordsSaid() if args.hear_said else None
    # The words said are served from a loop of their own: the bot's, busy with its calls,
    # would read a request's time late.
    hearing_server = ServerThread() if said is not None else None
    try:
        if said is not None and hearing_server is not None:
            # Up before the bot's port is drawn: the two must not draw the same one.
            hearing = hearing_server.serve(said_stt_app(said), free_port())
        port = free_port()
        local = settings.replace(
            public_url=f"http://127.0.0.1:{port}",
            twilio_auth_token=BENCH_TOKEN,
            data_dir=str(data_dir),
            max_calls=max(settings.max_calls, args.calls),
        )
        if args.hotwords:
            if local.duplex_workers:
                raise SystemExit(
                    "python -m benchmarks turns: --operator-names lists names for this "
                    "server's STT; duplex workers hear with their own (unset DUPLEX_WORKERS)"
                )
            local = local.replace(stt_hotwords=args.hotwords)
        if said is not None:
            if local.duplex_workers:
                raise SystemExit(
                    "python -m benchmarks turns: --hear-said hears through this server's "
                    "STT_URL; duplex workers hear with their own (unset DUPLEX_WORKERS)"
                )
            local = local.replace(stt_url=hearing, stt_url_model=SAID_MODEL)
        app = create_app(local)
        url = servers.serve(app, port)

        async def wait_ready() -> None:
            await asyncio.wait_for(app.state.services.ready.wait(), 600)

        servers.run(wait_ready(), timeout=620)
        outcomes = run_plan(url, BENCH_TOKEN, plan, args.calls, record_dir, said)
    finally:
        servers.close()
        if hearing_server is not None:
            hearing_server.close()
        if keep is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    described: dict[str, object] = {
        "stt_model": SAID_MODEL if args.hear_said else settings.stt_model,
        "turn_judge_weights": settings.turn_judge_weights or "shipped",
        "stt_hotwords": local.stt_hotwords,
        "max_calls": local.max_calls,
    }
    return outcomes, described


def _select(only: str) -> list[Script]:
    scripts = [s for s in SCRIPTS if only in s.name]
    if not scripts:
        names = ", ".join(s.name for s in SCRIPTS)
        raise SystemExit(
            f"python -m benchmarks turns: no script matches {only!r} (scripts: {names})"
        )
    return scripts


def _lines(spec: str) -> list[str]:
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in LINES]
    if unknown or not names:
        raise SystemExit(
            f"python -m benchmarks turns: unknown line {unknown} (lines: {', '.join(LINES)})"
        )
    return names


def bench_turns(args: argparse.Namespace) -> dict[str, object]:
    if args.calls < 1:
        raise SystemExit("python -m benchmarks turns: --calls must be >= 1")
    if args.hear_said and (args.calls != 1 or args.url):
        raise SystemExit(
            "python -m benchmarks turns: --hear-said needs the server started here and one "
            "call at a time (the words are placed on the call by time)"
        )
    if args.operator_names and (args.url or not args.corpus or args.hear_said):
        raise SystemExit(
            "python -m benchmarks turns: --operator-names sets STT_HOTWORDS on the server "
            "started here, from the --corpus calls' lines (not with --hear-said, whose "
            "words are the script's)"
        )
    line_names = _lines(args.lines)
    half_of: dict[str, str] = {}
    voices = Voices()
    if args.corpus:
        # Fresh material every run unless a seed is given: nothing can be fitted to it.
        args.seed = fresh_seed(args.seed)
        recordings = None if args.synthetic_only else voices.recordings
        scripts = corpus_scripts(
            args.seed,
            args.corpus,
            recordings,
            args.recorded_share,
            over_every_reply=args.over_every_reply,
        )
        half_of = halves(args.seed, scripts)
        print(f"corpus calls: seed {args.seed}", flush=True)
    else:
        scripts = _select(args.only)
        if args.seed is None:
            args.seed = 1
    prepared = [prepare(script, args.seed, voices) for script in scripts]
    args.hotwords = ""
    if args.operator_names:
        from benchmarks.hotwords import operator_list

        said = [
            " ".join(p for p in say.parts if isinstance(p, str)) for s in scripts for say in s.turns
        ]
        args.hotwords = operator_list(said, args.seed)
        print(f"STT_HOTWORDS: {args.hotwords}", flush=True)
    plan: Plan = []
    for name in line_names:
        line = replace(LINES[name], seed=args.seed)
        plan += [(name, line, p) for p in prepared]
    record_dir: Path | None = args.record_dir
    if record_dir is not None:
        record_dir.mkdir(parents=True, exist_ok=True)
    if args.url:
        outcomes = run_plan(args.url.rstrip("/"), args.auth_token, plan, args.calls, record_dir)
        described: dict[str, object] = {"url": args.url}
    else:
        outcomes, described = _serve_and_run(args, plan, record_dir)

    tables = []
    totals = Tally()
    verdicts = []
    for name in line_names:
        tally = Tally()
        for outcome in outcomes:
            if outcome.line == name:
                tally.add(outcome.tally)
        totals.add(tally)
        rows = table_rows(tally, clean=name == "clean", concurrent=args.calls)
        title = f"{name}: {LINES[name].label} — {tally.calls} calls, {args.calls} at once"
        print_table(title, rows)
        verdicts += [r.verdict for r in rows]
        tables.append({"line": name, "rows": [asdict(r) for r in rows]})
    # Totals: every line pooled, except mouth to mouth, whose targets are the clean line's.
    clean = [o.tally for o in outcomes if o.line == "clean"]
    totals.latencies_ms = [v for t in clean for v in t.latencies_ms]
    total_rows = table_rows(totals, clean=bool(clean), concurrent=args.calls)
    print_table(
        f"totals over {', '.join(line_names)} (mouth to mouth: clean line only)", total_rows
    )
    verdicts += [r.verdict for r in total_rows]
    tables.append({"line": "totals", "rows": [asdict(r) for r in total_rows]})
    # The halves; then the held-out half by who the caller is: synthesised by espeak-ng or
    # Piper, or a recorded person. Each as (table key, title, calls).
    groups: list[tuple[str, str, set[str]]] = []
    if half_of:
        for half in ("tuning", "held-out"):
            names = {n for n, of in half_of.items() if of == half}
            groups.append((f"{half} half", f"{half} half of the corpus calls", names))
        for engine in sorted({s.voice.engine for s in scripts}):
            key = f"held-out half, {engine} callers"
            voiced = {s.name for s in scripts if s.voice.engine == engine}
            groups.append((key, key, names & voiced))
    for key, title, names in groups:
        tally = Tally()
        for outcome in outcomes:
            if outcome.script in names:
                tally.add(outcome.tally)
        mine = [o.tally for o in outcomes if o.line == "clean" and o.script in names]
        tally.latencies_ms = [v for t in mine for v in t.latencies_ms]
        rows = table_rows(tally, clean=bool(mine), concurrent=args.calls)
        print_table(f"{title}, every line", rows)
        tables.append({"line": key, "rows": [asdict(r) for r in rows]})
    return {
        "machine": machine(),
        "verdict": "FAIL" if "FAIL" in verdicts else "PASS",
        "concurrent_calls": args.calls,
        "seed": args.seed,
        **described,
        "lines": line_names,
        "scripts": [s.name for s in scripts],
        "halves": half_of,
        "voices": {s.name: s.voice.label for s in scripts},
        "tables": tables,
        "calls": [asdict(o) for o in outcomes],
    }


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    turns = sub.add_parser(
        "turns", help="scripted calls: turn-taking judged at the caller's ear, against targets"
    )
    turns.add_argument(
        "--only", default="", metavar="SUBSTRING", help="scripts whose name has this"
    )
    turns.add_argument("--calls", type=int, default=1, help="callers at once (lanes)")
    turns.add_argument(
        "--lines",
        default="clean,echo,babble",
        help=f"comma-separated line conditions, from: {', '.join(LINES)}",
    )
    turns.add_argument(
        "--seed",
        type=int,
        default=None,
        help="delays, natural pauses, noise; with --corpus the calls too (default: 1, or a "
        "new seed with --corpus)",
    )
    turns.add_argument(
        "--corpus",
        type=int,
        default=0,
        metavar="CALLS",
        help="instead of the scripts, CALLS calls made fresh from chatterbot-corpus, "
        "a quarter of them people recorded (moonshine-voice's recordings), reported as a "
        "tuning and a held-out half",
    )
    turns.add_argument(
        "--synthetic-only",
        action="store_true",
        help="with --corpus: every caller synthesised (a seed's calls as before the "
        "recorded callers came in)",
    )
    turns.add_argument(
        "--recorded-share",
        type=float,
        default=RECORDED_SHARE,
        metavar="SHARE",
        help=f"with --corpus: this share of the calls recorded people, 0 to 1 (default "
        f"{RECORDED_SHARE}; the recorded calls of a seed change with it)",
    )
    turns.add_argument(
        "--hear-said",
        action="store_true",
        help="the bot hears the words each caller said, from the script, through STT_URL "
        "(benchmarks/turns/said_stt.py): perfect hearing, to measure what the rest of "
        "turn-taking does without Whisper's errors; one call at a time",
    )
    turns.add_argument(
        "--over-every-reply",
        action="store_true",
        help="with --corpus: every call speaks over each reply to its first three lines "
        "(a backchannel or an interruption), not over one reply of most calls: three "
        "times as many to measure what they cost",
    )
    turns.add_argument(
        "--operator-names",
        action="store_true",
        help="with --corpus: the server started here lists STT_HOTWORDS as an operator "
        "would: the names in the calls' corpus lines, and others up to 30",
    )
    turns.add_argument("--url", default="", help="dial a running server instead of starting one")
    turns.add_argument("--auth-token", default=os.environ.get("TWILIO_AUTH_TOKEN"))
    turns.add_argument(
        "--record-dir", type=Path, default=None, help="a stereo WAV per call (caller | bot)"
    )
    turns.add_argument(
        "--keep-records",
        type=Path,
        default=None,
        metavar="DIR",
        help="the started server's data folder: its call records stay there, to read with "
        "`offhook calls show` (DATA_DIR=DIR)",
    )
    turns.set_defaults(run=bench_turns)
    return turns
