"""`python -m benchmarks turns-compare`: runs on one seed, two sides, each measure's
difference with a bootstrap's interval over the calls of a half and the sides' runs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from benchmarks.turns.compare import Difference, compare, main
from benchmarks.turns.scoring import Tally

SCRIPTS = [f"corpus-{i:02d}" for i in range(12)]
HELD_OUT = [s for i, s in enumerate(SCRIPTS) if i % 2]


def run(
    cut_offs: dict[str, int] | None = None, *, seed: int = 7, says: str = "Where is it?"
) -> dict[str, Any]:
    """A `turns --corpus --json` result: each call 3 pauses, answered on every line."""
    calls = []
    for script in SCRIPTS:
        for line in ("clean", "echo"):
            tally = Tally(
                calls=1,
                expect_answer=4,
                answered=4,
                pause_turns=3,
                cut_offs=(cut_offs or {}).get(script, 0),
                latencies_ms=[600.0, 700.0, 650.0, 900.0],
            )
            turns = [{"kind": "question", "text": says}]
            calls.append({"line": line, "script": script, "tally": asdict(tally), "turns": turns})
    return {
        "seed": seed,
        "scripts": SCRIPTS,
        "lines": ["clean", "echo"],
        "voices": {s: "espeak-ng en-us 150 wpm" for s in SCRIPTS},
        "halves": {s: "held-out" if s in HELD_OUT else "tuning" for s in SCRIPTS},
        "concurrent_calls": 1,
        "calls": calls,
    }


def by_measure(differences: list[Difference]) -> dict[str, Difference]:
    return {d.measure: d for d in differences}


def test_a_run_compared_with_itself_differs_in_nothing() -> None:
    differences = compare([run()], [run()], draws=200)
    assert differences
    for d in differences:
        assert not d.shown, d
        if d.difference is not None:
            assert d.difference == 0 and d.low == d.high == 0, d


def test_more_cut_offs_in_every_held_out_call_is_a_difference_shown() -> None:
    worse = run({s: 1 for s in HELD_OUT})
    cut = by_measure(compare([run()], [worse], draws=500))["cut-offs in pauses"]
    assert cut.base == 0 and cut.other == pytest.approx(100 / 3)
    assert cut.low is not None and cut.low > 0
    assert cut.shown


def test_a_difference_carried_by_one_call_is_not_shown() -> None:
    one = run({HELD_OUT[0]: 3})  # each line of one call cut off at all three pauses
    cut = by_measure(compare([run()], [one], draws=500))["cut-offs in pauses"]
    assert cut.difference == pytest.approx(100 / 6)
    assert cut.low == 0 and not cut.shown


def test_the_held_out_half_is_compared_unless_told_otherwise() -> None:
    tuned = run({s: 2 for s in SCRIPTS if s not in HELD_OUT})
    assert by_measure(compare([run()], [tuned], draws=100))["cut-offs in pauses"].difference == 0
    tuning = by_measure(compare([run()], [tuned], half="tuning", draws=100))
    assert tuning["cut-offs in pauses"].shown


def test_a_difference_no_larger_than_the_bases_own_runs_differ_is_not_shown() -> None:
    # One run of the same code with every held-out call cut off once more (the box slower
    # that hour): against that run alone it shows; against both runs of the code, not.
    again = run({s: 1 for s in HELD_OUT})
    change = run({s: 1 for s in HELD_OUT})
    assert by_measure(compare([run()], [change], draws=500))["cut-offs in pauses"].shown
    both = by_measure(compare([run(), again], [change], draws=500))["cut-offs in pauses"]
    assert both.base == pytest.approx(100 / 6) and both.difference == pytest.approx(100 / 6)
    assert both.low == 0 and not both.shown


def test_each_side_needs_a_run() -> None:
    with pytest.raises(SystemExit, match="a run at least"):
        compare([run()], [])


def test_runs_of_other_calls_are_refused() -> None:
    with pytest.raises(SystemExit, match="'seed' differ"):
        compare([run(seed=7)], [run(seed=8)])
    # One seed, but a bench that draws other recorded calls from it.
    with pytest.raises(SystemExit, match="callers say other things"):
        compare([run(), run()], [run(says="[endgame_nagg_nell 3.84-4.22 s]")])


def test_the_command_prints_the_table_and_writes_the_differences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, other, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "cmp.json"
    base.write_text(json.dumps(run()))
    other.write_text(json.dumps(run({s: 1 for s in HELD_OUT})))
    argv = ["--base", str(base), "--other", str(other), "--draws", "200", "--json", str(out)]
    assert main(argv) == 0
    assert "| cut-offs in pauses | <= 5 % | 0.0 | 33.3 | +33.3 |" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["provenance"]["benchmark"] == "turns-compare"
    [cut] = [d for d in written["differences"] if d["measure"] == "cut-offs in pauses"]
    assert cut["shown"] is True and cut["low"] > 0
