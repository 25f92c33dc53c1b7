"""`python -m benchmarks judge` — has the caller finished? Turn judges on speech nobody here wrote.

    python -m benchmarks judge [--items 240] [--seed N] [--json out.json]
                               [--stt-url URL] [--judge-url URL] [--from-json run.json]

Material is made fresh for every run (benchmarks/judge_material.py): caller lines from
chatterbot-corpus, each paused at a random word boundary, in random espeak-ng and Piper
voices and rates, on clean and babble lines. At each pause and at each line's end, the
models hear what a call would have heard by then: Whisper's words (on the audio with a
pause inside the speech cut short where a call's front end finds one, as a call does;
`--pauses whole` hears it whole), Smart Turn's score, and the words judge's score
(agents/cascade/words_judge.py) with the bot's line before. The pauses are the scripted
one and every other one a call's speech detector finds in the line, such as a voice's
pause between two sentences, after which the caller goes on just the same.

Each judge says how long a silence it waits before answering. Waiting less than a pause
is a cut-off (the bot would answer the half sentence; cut-offs at the voice's own pauses
are also counted apart); at a line's end, the wait is the caller's dead air. The items
are shuffled into a tuning half and a held-out half; anything fitted (the fused judge's
weights and its two waits) is fitted on the tuning half only, and the held-out half is
the one to quote.

`--stt-url` hears with a transcription server and `--judge-url` judges with a words
judge's server, as STT_URL and TURN_JUDGE_URL make a call do: the refit printed is then
the TURN_JUDGE_WEIGHTS for that hearing and that judge. `--from-json` with `--judge-url`
asks the new judge about the words a saved run heard, without hearing them again.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from contextlib import closing, nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from agents.cascade.hosted_stt import HostedTranscriber
from agents.cascade.hosted_words_judge import HostedJudgeError, HostedWordsJudge
from agents.cascade.stt import MIN_WINDOW_S, SpeechToText, WhisperTranscriber
from agents.cascade.turn_evaluator import heard_as
from agents.cascade.words_judge import LlamaWordsJudge, WordsJudge
from agents.config import shown_url
from agents.turns.audio import CallerAudio
from agents.turns.config import FusedWeights, TurnTaking
from agents.turns.judge import FusedJudge, TurnJudge, TurnSoFar, VoiceJudge
from agents.turns.protocol import Evaluation, Hearing
from benchmarks.judge_material import Item, corpus_pairs, draw, pool_of, speak, to_16k
from benchmarks.provenance import add_seed_and_json, fresh_seed, write_result
from media.codec import mulaw_encode
from media.frontend import FrontEnd
from media.turn import EndOfTurnModel
from media.vad import SpeechStarted, SpeechStopped, VadEvent
from ops.caller_voice import CallerVoice

__all__ = ["Listeners", "Observation", "auc", "heard_ends", "judged", "main", "rejudge", "score"]

RATE = 8000
# The engine asks its models when the speech detector has seen the speech stop: the
# audio they get runs ~100 ms past the last word (Silero's lag and its first quiet window).
EVAL_TAIL_MS = 100
MAX_WAIT_MS = 3000  # a judge that has not answered by then: counted as this
# The mean wait at a turn's end a refit may spend: about what the word-list judge
# (retired) spent on fresh corpus material (772-881 ms a run).
BUDGET_MS = 800.0


@dataclass(frozen=True)
class Observation:
    """What the models made of a line up to a pause (`final` False) or its end."""

    item: int
    final: bool
    pause_ms: float  # the pause that followed (0 at the end)
    text: str
    hearing: str
    smart_turn: float
    words: float | None  # None: the judge gave no score in time (a call judges without)
    speech_s: float
    words_ms: float  # the words judge's own time for this check
    # Whisper's mean token log-probability (0.0 in runs saved before it was kept).
    avg_logprob: float = 0.0
    # A pause the voice made on its own (between sentences, at a comma), not the
    # scripted one: the caller went on after it all the same (none before 2026-11-29).
    natural: bool = False


@dataclass
class Listeners:
    """The models a call's engine asks at a pause, loaded once for a run."""

    stt: SpeechToText
    turn: EndOfTurnModel
    words_judge: LlamaWordsJudge | HostedWordsJudge

    @classmethod
    def load(
        cls,
        stt_model: Path,
        smart_turn: Path,
        gguf: Path,
        *,
        stt_window_s: int = MIN_WINDOW_S,
        hosted: HostedTranscriber | None = None,
        hosted_judge: HostedWordsJudge | None = None,
    ) -> Listeners:
        """`hosted`: a transcription server hears instead of the embedded Whisper, as
        STT_URL makes it in calls (`stt_model` is then not loaded); `hosted_judge`: a
        server judges the words instead of the embedded SmolLM2, as TURN_JUDGE_URL makes
        it (`gguf` is then not loaded)."""
        return cls(
            hosted or WhisperTranscriber(stt_model, threads=2, min_window_s=stt_window_s),
            EndOfTurnModel(smart_turn, threads=1),
            hosted_judge or LlamaWordsJudge(gguf, threads=2),
        )

    def close(self) -> None:
        self.words_judge.close()
        if isinstance(self.stt, HostedTranscriber):
            self.stt.close()

    def observe(
        self,
        bot: str,
        ended: np.ndarray,
        upto: int,
        events: list[VadEvent],
        *,
        item: int,
        final: bool,
        pause_ms: float,
        natural: bool = False,
    ) -> Observation:
        """What the models make of `ended` (8 kHz) up to sample `upto` and
        EVAL_TAIL_MS more, as a call's engine would ask them: Whisper on the audio with
        the speech detector's long pauses (`events`) cut short, the words judge after
        the bot's line `bot`, Smart Turn on the audio as it is."""
        tail = int(EVAL_TAIL_MS * RATE / 1000)
        audio = to_16k(ended[: upto + tail])
        heard = CallerAudio(16000)
        heard.add(0, audio)
        heard.speech(events)
        transcript = self.stt.transcribe(heard.for_words(0, audio.size))
        speech_s = upto / RATE
        hearing = heard_as(transcript, int(speech_s * 1000))
        words, words_ms = judged(self.words_judge, bot, transcript.text)
        return Observation(
            item=item,
            final=final,
            pause_ms=pause_ms,
            text=transcript.text.strip(),
            hearing=hearing.value,
            smart_turn=float(self.turn.predict(audio)),
            words=words,
            speech_s=speech_s,
            words_ms=words_ms,
            avg_logprob=transcript.avg_logprob,
            natural=natural,
        )


def observe(
    items: list[Item],
    seed: int,
    listeners: Listeners,
    *,
    shorten_pauses: bool = True,
) -> list[Observation]:
    """`shorten_pauses`: Whisper hears a pause inside the speech cut short, as in a call
    (agents/turns/audio.py), where the call's speech detection finds one."""
    rng = np.random.default_rng(seed + 1)
    piper = CallerVoice("piper", 165)
    found: list[Observation] = []
    for index, item in enumerate(items):
        spoken = speak(item, rng, piper)
        pause_ms = (spoken.pause_end - spoken.pause_start) * 1000 / RATE
        tail = int(EVAL_TAIL_MS * RATE / 1000)
        ended = np.concatenate([spoken.audio, np.zeros(tail, np.int16)])
        vad = speech_events(ended)
        events = vad if shorten_pauses else []
        # (where, the line's end?, the pause that follows, the voice's own pause?)
        asked = [
            (spoken.pause_start, False, pause_ms, False),
            (spoken.audio.size, True, 0.0, False),
        ]
        asked += [
            (upto, False, gap_ms, True)
            for upto, gap_ms in natural_pauses(vad, spoken.pause_start, spoken.pause_end)
        ]
        for upto, final, follows_ms, natural in asked:
            found.append(
                listeners.observe(
                    item.bot,
                    ended,
                    upto,
                    events,
                    item=index,
                    final=final,
                    pause_ms=follows_ms,
                    natural=natural,
                )
            )
        if (index + 1) % 20 == 0 or index + 1 == len(items):
            print(f"  {index + 1}/{len(items)} lines heard", file=sys.stderr, flush=True)
    return found


def judged(judge: WordsJudge, bot: str, words: str) -> tuple[float | None, float]:
    """The judge's score of `words` after the bot's line `bot`, and its time (ms). A
    server that gives no score in a call's time (its client's timeout) gives None, as
    that call's check would: the turn is then judged without words."""
    started = time.perf_counter()
    try:
        found: float | None = judge.complete(bot, words)
    except HostedJudgeError as exc:
        print(f"  no score: {exc}", file=sys.stderr, flush=True)
        found = None
    return found, (time.perf_counter() - started) * 1000


def rejudge(
    items: list[Item], observations: list[Observation], judge: WordsJudge
) -> list[Observation]:
    """The same heard words and voice scores, with `judge`'s scores of the words: a
    judge model compared on exactly the hearing another run had."""
    found = []
    for index, obs in enumerate(observations):
        words, words_ms = judged(judge, items[obs.item].bot, obs.text)
        found.append(replace(obs, words=words, words_ms=words_ms))
        if (index + 1) % 100 == 0 or index + 1 == len(observations):
            print(f"  {index + 1}/{len(observations)} rejudged", file=sys.stderr, flush=True)
    return found


def natural_pauses(
    events: list[VadEvent], pause_start: int, pause_end: int
) -> list[tuple[int, float]]:
    """The pauses the speech detector finds inside a line other than its scripted one
    (`pause_start`..`pause_end`, 8 kHz samples): where each begins (8 kHz) and how long
    it lasts (ms). A call's engine asks its judge at each; the caller goes on after it."""
    found = []
    for stop, start in itertools.pairwise(events):
        if not isinstance(stop, SpeechStopped) or not isinstance(start, SpeechStarted):
            continue
        begin, end = stop.sample // 2, start.sample // 2  # the 16 kHz clock -> 8 kHz
        if begin < pause_end and end > pause_start:
            continue  # the scripted pause
        found.append((begin, (end - begin) * 1000 / RATE))
    return found


def speech_events(audio_8k: np.ndarray) -> list[VadEvent]:
    """Where a call's front end (echo canceller, speech gate, Silero) hears speech start
    and stop in `audio_8k`, on the 16 kHz clock of `to_16k(audio_8k)`."""
    front = FrontEnd()
    lead = np.zeros(RATE, np.int16)  # a second of line before the caller speaks
    line = np.concatenate([lead, audio_8k.astype(np.int16)])
    events: list[VadEvent] = []
    for at in range(0, line.size - 159, 160):
        events += front.process(mulaw_encode(line[at : at + 160])).events
    front.close()
    shift = 2 * lead.size
    return [replace(event, sample=event.sample - shift) for event in events]


def _turn(obs: Observation) -> TurnSoFar:
    text = obs.text
    result = Evaluation(
        end=int(obs.speech_s * 16000),
        probability=obs.smart_turn,
        text=text,
        hearing=Hearing(obs.hearing),
        words=obs.words,
        avg_logprob=obs.avg_logprob,
    )
    return TurnSoFar(result=result, run_s=obs.speech_s, patience_ms=0)


def wait_ms(judge: TurnJudge, obs: Observation) -> int:
    """The shortest silence after which `judge` answers (MAX_WAIT_MS: not by then)."""
    turn = _turn(obs)
    for silence in range(0, MAX_WAIT_MS, 10):
        if judge.ends_turn(turn, silence):
            return silence
    return MAX_WAIT_MS


@dataclass(frozen=True)
class Score:
    pauses: int
    cut_offs: int
    ends: int
    wait_p50_ms: float
    wait_p90_ms: float
    wait_mean_ms: float
    long_waits: int  # ends waited 1 s or more
    # Of the pauses and cut-offs, those at the voice's own pauses (`Observation.natural`).
    natural_pauses: int = 0
    natural_cut_offs: int = 0

    @property
    def cut_off_rate(self) -> float:
        return self.cut_offs / self.pauses if self.pauses else 0.0


def score(judge: TurnJudge, observations: list[Observation]) -> Score:
    pauses = [o for o in observations if not o.final]
    ends = [o for o in observations if o.final]
    cut = [o for o in pauses if wait_ms(judge, o) < o.pause_ms]
    waits = np.array([wait_ms(judge, o) for o in ends], dtype=float)
    return Score(
        pauses=len(pauses),
        cut_offs=len(cut),
        natural_pauses=sum(o.natural for o in pauses),
        natural_cut_offs=sum(o.natural for o in cut),
        ends=len(ends),
        wait_p50_ms=float(np.percentile(waits, 50)) if waits.size else 0.0,
        wait_p90_ms=float(np.percentile(waits, 90)) if waits.size else 0.0,
        wait_mean_ms=float(waits.mean()) if waits.size else 0.0,
        long_waits=int((waits >= 1000).sum()),
    )


def fit(observations: list[Observation], budget_ms: float, *, hearing: bool = True) -> FusedWeights:
    """The fused judge's parameters that cut off the fewest pauses while the mean wait
    at a turn's end stays within `budget_ms` (ties: the shorter p90 wait). The mean,
    not the median: the fused judge's waits have two peaks (sure and unsure), and a
    median budget sits on the cliff between them.

    A direct search: where the words score tips from "goes on" to "finished" (a
    quantile of the material's scores), how sharply, how much Smart Turn adds (never
    against an end: its scores of synthetic voices say little about callers), how much
    Whisper's doubt about the words delays the end (`hearing`: searched, else none), and
    the waits at either side."""
    # Words the judge gave no score are fitted as words not heard: the unsure wait.
    # (A call waits on the voice judge for them, END_OF_TURN_MAX_SILENCE_MS; `score`
    # asks the real judge, so only the fit, not the figures, takes this shortcut.)
    heard = np.array(
        [
            o.hearing == Hearing.HEARD.value and bool(o.text.strip()) and o.words is not None
            for o in observations
        ]
    )
    words = np.array([_logit(0.0 if o.words is None else o.words) for o in observations])
    voice = np.array([_logit(o.smart_turn) for o in observations])
    doubt = np.array([o.avg_logprob for o in observations])
    final = np.array([o.final for o in observations])
    pause = np.array([o.pause_ms for o in observations])
    best: tuple[tuple[float, float], FusedWeights] | None = None
    # Where the score may tip: its quantiles over the words scored (none: any place).
    tips = np.quantile(words[heard], np.linspace(0.05, 0.95, 19)) if heard.any() else [0.0]
    for tip in tips:
        for sharpness in (0.5, 1.0, 2.0, 4.0, 8.0):
            for voice_weight, hearing_weight in itertools.product(
                (0.0, 0.5, 1.0), (0.0, 0.5, 1.0, 2.0, 4.0) if hearing else (0.0,)
            ):
                z = sharpness * (words - tip) + voice_weight * voice + hearing_weight * doubt
                p = 1 / (1 + np.exp(-np.clip(z, -40, 40)))
                for sure_ms in range(200, 801, 100):
                    for unsure_ms in range(1000, 2601, 200):
                        wait = np.where(heard, sure_ms + (unsure_ms - sure_ms) * (1 - p), unsure_ms)
                        if float(np.mean(wait[final])) > budget_ms:
                            continue
                        cut = float(np.mean(wait[~final] < pause[~final]))
                        key = (cut, float(np.percentile(wait[final], 90)))
                        if best is None or key < best[0]:
                            weights = FusedWeights(
                                bias=float(-sharpness * tip),
                                words=sharpness,
                                smart_turn=voice_weight,
                                sure_wait_ms=sure_ms,
                                unsure_wait_ms=unsure_ms,
                                hearing=hearing_weight,
                            )
                            best = (key, weights)
    if best is None:
        raise SystemExit(f"no judge answers within a mean of {budget_ms:.0f} ms")
    return best[1]


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return float(np.log(p / (1 - p)))


def describe(items: list[Item], observations: list[Observation]) -> dict[str, float]:
    """What limits the judges on this material: how well Whisper heard the lines' ends
    (word error rate, by voice engine) and how well each score tells an end from a
    pause (ROC AUC: 1 perfect, 0.5 chance, below 0.5 backwards)."""
    from benchmarks.hearing import wer

    ends = [o for o in observations if o.final]

    def pooled_wer(engine: str | None) -> float:
        chosen = [o for o in ends if engine is None or items[o.item].engine == engine]
        words = sum(len(items[o.item].caller.split()) for o in chosen)
        errors = sum(
            wer(items[o.item].caller, o.text) * len(items[o.item].caller.split()) for o in chosen
        )
        return round(errors / words, 3) if words else 0.0

    return {
        "heard_ends": heard_ends(observations),
        "wer": pooled_wer(None),
        "wer_espeak": pooled_wer("espeak"),
        "wer_piper": pooled_wer("piper"),
        "auc_words": auc(observations, "words"),
        "auc_smart_turn": auc(observations, "smart_turn"),
    }


def heard_ends(observations: list[Observation]) -> float:
    """The share of turns' ends Whisper heard words in (not asked again)."""
    ends = [o for o in observations if o.final]
    return round(sum(o.hearing == "heard" for o in ends) / max(len(ends), 1), 3)


def auc(observations: list[Observation], score: str) -> float:
    """How well `score` ("words", "smart_turn") ranks turns' ends above pauses: ROC AUC
    (1 perfect, 0.5 chance, below 0.5 backwards)."""
    scored = [o for o in observations if getattr(o, score) is not None]
    low = np.array([getattr(o, score) for o in scored if not o.final])
    high = np.array([getattr(o, score) for o in scored if o.final])
    if not low.size or not high.size:
        return 0.5
    wins = (low[:, None] < high[None, :]).mean() + 0.5 * (low[:, None] == high[None, :]).mean()
    return round(float(wins), 3)


def hosted_judge(url: str, model: str) -> HostedWordsJudge:
    """The words judge at `url`, as TURN_JUDGE_URL makes a call's (its key from
    TURN_JUDGE_API_KEY), asked once first as a server's start asks it: a server that
    cannot judge ends the run before any material is made."""
    from app.settings import Settings

    judge = HostedWordsJudge(url, model=model, api_key=Settings.from_env().turn_judge_api_key)
    try:
        judge.complete("How can I help you?", "Hello", timeout_s=10.0)
    except HostedJudgeError as exc:
        judge.close()
        raise SystemExit(f"the words judge at {shown_url(url)} cannot judge: {exc}") from exc
    return judge


def _observe_fresh(
    items: list[Item],
    seed: int,
    stt: str,
    shorten: bool,
    window_s: int,
    stt_url: str = "",
    judge: HostedWordsJudge | None = None,
) -> list[Observation]:
    from agents.assets import STT_ASSETS, ModelCache
    from app.settings import Settings

    settings = Settings.from_env()
    cache = ModelCache(settings.model_cache_dir)
    heard_by = f"{stt} at {shown_url(stt_url)}" if stt_url else f"Whisper {stt}"
    print(
        f"seed {seed}: {len(items)} caller lines, {heard_by}, {window_s} s window",
        file=sys.stderr,
    )
    hosted = None
    if stt_url:  # `stt` names the server's model; its key is STT_API_KEY's
        hosted = HostedTranscriber(stt_url, model=stt, api_key=settings.stt_api_key)
    listeners = Listeners.load(
        Path() if hosted else cache.path(STT_ASSETS[stt]),
        cache.path("smart-turn-v3.2"),
        Path() if judge else cache.path("smollm2-135m-instruct"),
        stt_window_s=window_s,
        hosted=hosted,
        hosted_judge=judge,
    )
    try:
        return observe(items, seed, listeners, shorten_pauses=shorten)
    finally:
        listeners.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks judge", description=__doc__)
    parser.add_argument("--items", type=int, default=240, help="caller lines (default 240)")
    add_seed_and_json(parser)
    parser.add_argument(
        "--stt",
        default="tiny.en",
        help="Whisper model (tiny.en or base), or the model --stt-url serves",
    )
    parser.add_argument(
        "--stt-url",
        default="",
        help="an OpenAI-compatible transcription server to hear the callers with instead "
        "(as STT_URL in calls; its key from STT_API_KEY)",
    )
    parser.add_argument(
        "--judge-url",
        default="",
        help="an OpenAI-compatible server to run the words judge on instead of the "
        "embedded SmolLM2 (as TURN_JUDGE_URL in calls; its key from TURN_JUDGE_API_KEY)",
    )
    parser.add_argument("--judge-model", default="", help="the model name sent to --judge-url")
    parser.add_argument(
        "--stt-window",
        type=int,
        default=MIN_WINDOW_S,
        help=f"Whisper's shortest encoder window, s (10-30, default {MIN_WINDOW_S})",
    )
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=BUDGET_MS,
        help="the mean wait at a turn's end the refit may spend (default "
        f"{BUDGET_MS:.0f} ms: about what the word-list judge it replaced spent)",
    )
    parser.add_argument(
        "--pauses",
        choices=("shortened", "whole"),
        default="shortened",
        help="what Whisper hears of a pause inside the speech: cut short where speech "
        "detection finds one, as in a call (default), or whole",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="score the material a run wrote with --json again (its seed, its halves)",
    )
    args = parser.parse_args(argv)
    if args.judge_model and not args.judge_url:
        parser.error("--judge-model names the model at --judge-url")
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        seed = int(saved["seed"])
        # The material is the saved run's: so are its size and its Whisper.
        args.items = len(saved["items"])
        args.stt = saved.get("provenance", {}).get("options", {}).get("stt", args.stt)
        rng = np.random.default_rng(seed)
        items = draw(rng, len(saved["items"]), corpus_pairs())
        observations = [Observation(**o) for o in saved["observations"]]
        if args.judge_url:  # the saved words, asked of another judge
            with closing(hosted_judge(args.judge_url, args.judge_model)) as server:
                observations = rejudge(items, observations, server)
    else:
        seed = fresh_seed(args.seed)
        rng = np.random.default_rng(seed)
        items = draw(rng, args.items, corpus_pairs())
        hosted = hosted_judge(args.judge_url, args.judge_model) if args.judge_url else None
        with closing(hosted) if hosted else nullcontext():
            observations = _observe_fresh(
                items,
                seed,
                args.stt,
                args.pauses == "shortened",
                args.stt_window,
                args.stt_url,
                hosted,
            )
    tuning = [o for o in observations if pool_of(items[o.item].caller) == "tuning"]
    held_out = [o for o in observations if pool_of(items[o.item].caller) == "held-out"]
    config = TurnTaking()
    weights = fit(tuning, args.budget_ms)
    # The same search with Whisper's confidence left out: what that feature adds.
    deaf = fit(tuning, args.budget_ms, hearing=False)
    judges: dict[str, TurnJudge] = {
        # Without a words judge (TURN_JUDGE=voice), and the fused judge's fallback.
        "voice (Smart Turn, silence)": VoiceJudge(config),
        "silence only": VoiceJudge(config, smart_turn=False),
        # The product's weights: fitted on the tuning pool of an earlier run.
        "fused, shipped weights": FusedJudge(config),
        "fused, refitted": FusedJudge(config, weights),
        "fused, refitted, no confidence": FusedJudge(config, deaf),
    }
    rows = {}
    for name, judge in judges.items():
        for half, obs in (("tuning", tuning), ("held-out", held_out)):
            rows[f"{name} / {half}"] = asdict(score(judge, obs))
    checks = np.array([o.words_ms for o in observations])
    unscored = sum(o.words is None for o in observations)
    judged_by = (
        f"{args.judge_model or 'a model'} at {shown_url(args.judge_url)}"
        if args.judge_url
        else "embedded SmolLM2"
    )
    heading = (
        f"{'judge / half':34} {'cut-offs':>9} {'of them natural':>16} "
        f"{'end wait p50/p90/mean':>22} {'>=1 s':>6}"
    )
    print(f"\n{heading}")
    for name, row in rows.items():
        cut = f"{row['cut_offs']}/{row['pauses']}"
        natural = f"{row['natural_cut_offs']}/{row['natural_pauses']}"
        p50, p90, mean = row["wait_p50_ms"], row["wait_p90_ms"], row["wait_mean_ms"]
        waits = f"{p50:.0f}/{p90:.0f}/{mean:.0f} ms"
        print(f"{name:34} {cut:>9} {natural:>16} {waits:>22} {row['long_waits']:>6}")
    material = describe(items, observations)
    material_held_out = describe(items, held_out)
    print(
        f"\nfused weights (tuning half, mean wait <= {args.budget_ms:.0f} ms): {weights}\n"
        f"...as a setting (for this hearing and judge): TURN_JUDGE_WEIGHTS={weights.spec}\n"
        f"...without Whisper's confidence: {deaf}\n"
        f"words judge ({judged_by}) per check: "
        f"p50 {np.percentile(checks, 50):.0f} ms, p90 {np.percentile(checks, 90):.0f} ms, "
        f"no score in time {unscored}/{len(observations)}\n"
        f"material: {material}\nheld-out material: {material_held_out}"
    )
    if args.json:
        result = {
            "seed": seed,
            "rows": rows,
            "weights": asdict(weights),
            "weights_no_confidence": asdict(deaf),
            "material": material,
            "material_held_out": material_held_out,
            "words_judged_by": judged_by,
            "words_unscored": unscored,
            "words_check_ms": {
                "p50": float(np.percentile(checks, 50)),
                "p90": float(np.percentile(checks, 90)),
            },
            "items": [asdict(i) for i in items],
            "observations": [asdict(o) for o in observations],
        }
        write_result(args.json, "judge", argv, vars(args) | {"seed": seed}, result)
    return 0
