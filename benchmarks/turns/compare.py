"""`python -m benchmarks turns-compare --base A.json [A2.json ...] --other B.json [...]`:
runs of `turns --corpus` on one seed (the same calls), two sides (the code as it is, a
change), measure by measure, with how far apart the sides could be by chance.

One run's figures move between runs of the same code on the same seed: main's turn
taking twice on seed 374900 gave a clean mouth-to-mouth p50 of 660 and 864 ms and 9 and
11 cut-offs in 30 pauses (docs/benchmarks.md). The carry-on of a sentence over the
reply's first words was adopted on one pair of runs and reverted on two more (seeds
998271 and 374900), each time on differences smaller than that. So each measure gets
the mean of each side's runs, and their difference (other - base) a 95 % interval from
a bootstrap: each draw takes the half's calls with replacement, paired (a call is its
script on every line, and both sides' outcomes of it are drawn together), and one run
of each side at random. The interval is thus that of one run against one run: wider
than the means' own, on the cautious side. A difference whose interval holds 0 is not
shown by the runs.

The calls hold how much a measure moves with which calls the half happens to hold. With
six calls in a half a percentile bootstrap's interval is rough, and if anything too
narrow. The runs hold what no resampling of calls can: a shift that every call of a run
shares, the box slower in one run than in another (main's turn taking, re-run on seed
374900, came out slower on the clean line turn by turn, the median turn +160 ms over
both halves, with 7 underruns against none; with one run a side this compare calls its
+204 ms of held-out clean p50 shown). So give each side two runs or more, the sides'
runs alternating in time (A, B, A, B).

Each measure is computed by the bench's own `table_rows`, mouth to mouth on the clean
line, as in the runs' tables. Runs are the same calls when their seed, scripts, lines,
voices and halves agree and each call's turns say the same.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.provenance import write_result
from benchmarks.turns.report import table_rows
from benchmarks.turns.scoring import Tally

__all__ = ["Difference", "compare", "main"]

DRAWS = 2000
# What both runs must share to be the same calls.
SAME_CALLS = ("seed", "scripts", "lines", "voices", "halves")
_TALLY_FIELDS = {f.name for f in fields(Tally)}


@dataclass(frozen=True)
class Difference:
    measure: str
    target: str
    base: float | None  # the mean of the side's runs
    other: float | None
    difference: float | None
    low: float | None  # the 95 % interval of the difference
    high: float | None

    @property
    def shown(self) -> bool:
        """Whether the runs show a difference: its interval leaves out 0."""
        if self.low is None or self.high is None:
            return False
        return self.low > 0 or self.high < 0


Run = Mapping[str, Any]
Calls = dict[str, list[tuple[str, Tally]]]  # script -> (line, tally) on each line


def _said(run: Run) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """What each call's caller said, turn by turn: (kind, words or clip)."""
    return {
        (call["script"], call["line"]): [(t["kind"], t["text"]) for t in call["turns"]]
        for call in run["calls"]
    }


def _calls(run: Run, half: str) -> Calls:
    halves: Mapping[str, str] = run["halves"]
    by_script: Calls = {}
    for call in run["calls"]:
        if half != "all" and halves.get(call["script"]) != half:
            continue
        known = {k: v for k, v in call["tally"].items() if k in _TALLY_FIELDS}
        by_script.setdefault(call["script"], []).append((call["line"], Tally(**known)))
    return by_script


def _values(
    calls: Sequence[list[tuple[str, Tally]]], concurrent: int
) -> dict[str, tuple[str, float | None]]:
    """The target rows' (target, value) over `calls`, as the bench's tables compute them."""
    tally = Tally()
    latencies: list[float] = []
    clean = False
    for lines in calls:
        for line, one in lines:
            tally.add(one)
            if line == "clean":
                clean = True
                latencies += one.latencies_ms
    tally.latencies_ms = latencies
    rows = table_rows(tally, clean=clean, concurrent=concurrent)
    return {r.measure: (r.target, r.value) for r in rows if r.target != "-"}


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def compare(
    base: Sequence[Run],
    other: Sequence[Run],
    *,
    half: str = "held-out",
    draws: int = DRAWS,
    seed: int = 0,
) -> list[Difference]:
    """Each target measure of two sides, each one run or more of the same calls, over
    `half` ("held-out", "tuning" or "all"): the mean of each side's runs, and a 95 %
    interval of the difference from a bootstrap that draws the calls (paired) and, on
    each side, one of its runs."""
    if not base or not other:
        raise SystemExit("turns-compare: a run at least on each side")
    if draws < 1:
        raise SystemExit("turns-compare: --draws must be 1 or more")
    first = base[0]
    said = _said(first)
    for run in [*base, *other]:
        for key in SAME_CALLS:
            if run.get(key) != first.get(key):
                raise SystemExit(f"turns-compare: not the same calls: the runs' {key!r} differ")
        if _said(run) != said:
            # The same seed draws other recorded calls across some bench changes.
            raise SystemExit("turns-compare: not the same calls: their callers say other things")
        if run.get("concurrent_calls") != first.get("concurrent_calls"):
            raise SystemExit("turns-compare: the runs placed different numbers of calls at once")
    concurrent = int(first.get("concurrent_calls") or 1)
    sides = [[_calls(run, half) for run in side] for side in (base, other)]
    scripts = sorted(sides[0][0])
    if not scripts:
        raise SystemExit(f"turns-compare: no calls in the {half} half")
    if any(sorted(calls) != scripts for side in sides for calls in side):
        raise SystemExit("turns-compare: the runs hold different calls in that half")
    observed = [
        [_values([calls[s] for s in scripts], concurrent) for calls in side] for side in sides
    ]
    rng = np.random.default_rng(seed)
    drawn: dict[str, list[float]] = {m: [] for m in observed[0][0]}
    for _ in range(draws):
        picks = [scripts[int(i)] for i in rng.integers(0, len(scripts), size=len(scripts))]
        mine, theirs = (side[int(rng.integers(0, len(side)))] for side in sides)
        a = _values([mine[s] for s in picks], concurrent)
        b = _values([theirs[s] for s in picks], concurrent)
        for measure in drawn:
            left, right = a[measure][1], b[measure][1]
            if left is not None and right is not None:
                drawn[measure].append(right - left)
    out = []
    for measure, (target, _) in observed[0][0].items():
        mean = [_mean([values[measure][1] for values in side]) for side in observed]
        difference = low = high = None
        if mean[0] is not None and mean[1] is not None:
            difference = mean[1] - mean[0]
            # An interval only when most draws measured it (few pauses or interruptions
            # in a draw leave some empty): else it would describe other draws than these.
            if len(drawn[measure]) >= draws * 0.9:
                low, high = (float(v) for v in np.percentile(drawn[measure], [2.5, 97.5]))
        out.append(Difference(measure, target, mean[0], mean[1], difference, low, high))
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_differences(differences: Sequence[Difference], half: str, runs: tuple[int, int]) -> None:
    print(
        f"{half} half: other - base, {runs[0]} and {runs[1]} run(s) (a bootstrap over the "
        "calls, paired, and over each side's runs)"
    )
    if min(runs) == 1:
        print("(one run a side: a shift all of a run's calls share is not in the interval)")
    print("| measure | target | base | other | difference | 95 % interval | shown |")
    print("|---|---|---|---|---|---|---|")
    for d in differences:
        interval = "-" if d.low is None else f"{d.low:+.1f} .. {d.high:+.1f}"
        diff = "-" if d.difference is None else f"{d.difference:+.1f}"
        print(
            f"| {d.measure} | {d.target} | {_fmt(d.base)} | {_fmt(d.other)} | {diff} "
            f"| {interval} | {'yes' if d.shown else 'no'} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks turns-compare", description=__doc__)
    parser.add_argument(
        "--base", type=Path, nargs="+", required=True, help="`turns --corpus --json` results"
    )
    parser.add_argument(
        "--other", type=Path, nargs="+", required=True, help="more, on the same seed"
    )
    parser.add_argument(
        "--half", choices=("held-out", "tuning", "all"), default="held-out", help="(held-out)"
    )
    parser.add_argument("--draws", type=int, default=DRAWS, help=f"bootstrap draws ({DRAWS})")
    parser.add_argument("--json", type=Path, help="also write the differences here")
    args = parser.parse_args(argv)
    sides = [[json.loads(path.read_text()) for path in paths] for paths in (args.base, args.other)]
    differences = compare(sides[0], sides[1], half=args.half, draws=args.draws)
    print_differences(differences, args.half, (len(sides[0]), len(sides[1])))
    if args.json is not None:
        result = {
            "half": args.half,
            "draws": args.draws,
            "seed": sides[0][0].get("seed"),
            **{
                name: [
                    {"path": str(path), "commit": run.get("provenance", {}).get("commit")}
                    for path, run in zip(paths, side, strict=True)
                ]
                for name, paths, side in (
                    ("base", args.base, sides[0]),
                    ("other", args.other, sides[1]),
                )
            },
            "differences": [vars(d) | {"shown": d.shown} for d in differences],
        }
        write_result(args.json, "turns-compare", argv, {"half": args.half}, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
