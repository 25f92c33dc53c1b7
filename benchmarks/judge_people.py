"""`python -m benchmarks judge-people` — the turn judges at real people's own pauses.

    python -m benchmarks judge-people [--lines clean,babble] [--seed N] [--json out.json]

`judge` draws its callers from espeak-ng and Piper, whose prosody Smart Turn scores
backwards, and the fused judge's weights were fitted there. This asks the same judges
about people: the recordings `bench turns` calls with (benchmarks/turns/recordings.py,
moonshine-voice's assets), cut into one-sentence turns where the reader stopped.

Nothing is paused by hand. Each pause is one the reader made inside a sentence, as long
as they made it: a judge that waits less answers into it, a cut-off. Only pauses at least
as long as the shortest wait the engine ever answers after (`END_OF_TURN_MIN_SILENCE_MS`)
count; shorter ones are gaps between words no judge can cut into. Each turn's end, where
the reader stopped, is a turn's end; the judge's wait there is dead air. At each, the
models hear what a call's would by then (benchmarks/judge.py `Listeners`), with the
bot's greeting as the line before. Nothing is fitted here: the material is one book's
page, a play's scene and a quotation, too little to fit on. It says whether the judges
fitted on synthetic voices carry over to people, and what Smart Turn tells about them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass

import numpy as np

from agents.turns.config import TurnTaking
from agents.turns.judge import FusedJudge, TurnJudge, VoiceJudge
from benchmarks.judge import (
    EVAL_TAIL_MS,
    Listeners,
    Observation,
    auc,
    heard_ends,
    score,
    speech_events,
)
from benchmarks.judge_material import on_line
from benchmarks.provenance import add_seed_and_json, fresh_seed, write_result
from benchmarks.turns.recordings import PAUSE_MARGIN_MS, Clip, Recordings, Utterance

__all__ = ["Moment", "main", "moments"]

RATE = 8000


@dataclass(frozen=True)
class Moment:
    """A point in a recorded turn where a judge is asked: a pause the reader made inside
    the sentence (`pause_ms` long), or the turn's end."""

    clip: Clip  # the turn
    upto_ms: int  # where the speech stopped, in ms of the recording
    pause_ms: float  # 0 at the turn's end
    text: str  # the turn's words, as the recordings' listener heard them

    @property
    def final(self) -> bool:
        return self.pause_ms == 0


def moments(utterances: list[Utterance], shortest_pause_ms: int) -> list[Moment]:
    """Each turn's end, and the reader's pauses inside its one sentence of at least
    `shortest_pause_ms` with speech on both sides. In a turn said whole with several
    sentences the pauses may end a sentence: only its end is asked."""
    found: list[Moment] = []
    for u in utterances:
        if not u.sentences_inside:
            for a, b in u.inner_pauses:
                inside = (
                    a - u.clip.start_ms >= PAUSE_MARGIN_MS and u.clip.end_ms - b >= PAUSE_MARGIN_MS
                )
                if inside and b - a >= shortest_pause_ms:
                    found.append(Moment(u.clip, a, float(b - a), u.text))
        found.append(Moment(u.clip, u.clip.end_ms, 0.0, u.text))
    return found


def observe(
    recordings: Recordings,
    found: list[Moment],
    listeners: Listeners,
    bot: str,
    line: str,
    rng: np.random.Generator,
) -> list[Observation]:
    """The models at each moment, on `line`. The audio runs on past the speech's stop as
    the recording does (the reader's pause itself), so the models hear the room."""
    tail_ms = EVAL_TAIL_MS
    observations = []
    for index, moment in enumerate(found):
        stop = moment.clip.end_ms if moment.final else moment.upto_ms
        audio = recordings.clip(Clip(moment.clip.recording, moment.clip.start_ms, stop + tail_ms))
        wanted = (stop + tail_ms - moment.clip.start_ms) * RATE // 1000
        audio = np.concatenate([audio, np.zeros(max(0, wanted - audio.size), np.int16)])
        heard = on_line(audio, line, rng)
        upto = (stop - moment.clip.start_ms) * RATE // 1000
        observations.append(
            listeners.observe(
                bot,
                heard,
                upto,
                speech_events(heard),
                item=index,
                final=moment.final,
                pause_ms=moment.pause_ms,
            )
        )
    return observations


def _listeners() -> Listeners:
    from agents.assets import STT_ASSETS, ModelCache
    from app.settings import Settings

    settings = Settings.from_env()
    cache = ModelCache(settings.model_cache_dir)
    return Listeners.load(
        cache.path(STT_ASSETS[settings.stt_model]),
        cache.path("smart-turn-v3.2"),
        cache.path("smollm2-135m-instruct"),
    )


def main(argv: list[str] | None = None) -> int:
    from app.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m benchmarks judge-people", description=__doc__)
    parser.add_argument("--lines", default="clean,babble", help="clean and/or babble")
    add_seed_and_json(parser, seed_help="the babble's draw (default: new)")
    args = parser.parse_args(argv)
    lines = [line.strip() for line in args.lines.split(",") if line.strip()]
    if not lines or any(line not in ("clean", "babble") for line in lines):
        parser.error("--lines: clean and/or babble")
    seed = fresh_seed(args.seed)
    config = TurnTaking()
    recordings = Recordings()
    found = moments(recordings.utterances, config.min_silence_ms)
    settings = Settings.from_env()
    listeners = _listeners()
    pauses = sum(not m.final for m in found)
    print(
        f"seed {seed}: {len(found) - pauses} recorded turns, {pauses} of the readers' pauses "
        f"of {config.min_silence_ms} ms or more inside them, Whisper {settings.stt_model}",
        file=sys.stderr,
    )
    judges: dict[str, TurnJudge] = {
        "voice (Smart Turn, silence)": VoiceJudge(config),
        "silence only": VoiceJudge(config, smart_turn=False),
        "fused, shipped weights": FusedJudge(config),
    }
    rng = np.random.default_rng(seed)
    by_line: dict[str, list[Observation]] = {}
    for line in lines:
        by_line[line] = observe(recordings, found, listeners, settings.greeting, line, rng)
    if len(lines) > 1:
        by_line["every line"] = [o for line in lines for o in by_line[line]]
    rows: dict[str, dict[str, object]] = {}
    print(f"\n{'line / judge':34} {'cut-offs':>9} {'end wait p50/p90/mean':>22} {'>=1 s':>6}")
    for line, observations in by_line.items():
        for name, judge in judges.items():
            row = asdict(score(judge, observations))
            rows[f"{line} / {name}"] = row
            p50, p90, mean = row["wait_p50_ms"], row["wait_p90_ms"], row["wait_mean_ms"]
            waits = f"{p50:.0f}/{p90:.0f}/{mean:.0f} ms"
            cut = f"{row['cut_offs']}/{row['pauses']}"
            print(f"{line + ' / ' + name:34} {cut:>9} {waits:>22} {row['long_waits']:>6}")
    material = {
        line: {
            "heard_ends": heard_ends(observations),
            "auc_words": auc(observations, "words"),
            "auc_smart_turn": auc(observations, "smart_turn"),
        }
        for line, observations in by_line.items()
    }
    print(f"\nmaterial: {material}")
    if args.json:
        result = {
            "seed": seed,
            "rows": rows,
            "material": material,
            "moments": [asdict(m) | {"label": m.clip.label} for m in found],
            "observations": {
                line: [asdict(o) for o in obs] for line, obs in by_line.items() if line in lines
            },
        }
        write_result(args.json, "judge-people", argv, vars(args) | {"seed": seed}, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
