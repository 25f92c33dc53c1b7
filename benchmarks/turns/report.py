"""The measures of `python -m benchmarks turns` against their targets, as table rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from benchmarks.measure import percentile
from benchmarks.turns.scoring import Tally

# The bar: a backchannel may cost the caller at most this much of the reply.
COSTLY_PAUSE_MS: Final = 300.0


@dataclass(frozen=True)
class Row:
    measure: str
    result: str
    target: str
    verdict: str  # PASS, FAIL, or "-" (informative, or nothing to judge)
    value: float | None = None


def _pct(part: int, whole: int) -> float | None:
    return 100 * part / whole if whole else None


def _ratio(part: int, whole: int) -> str:
    pct = _pct(part, whole)
    return f"{part}/{whole}" + ("" if pct is None else f" ({pct:.1f} %)")


def _verdict(value: float | None, ok: Callable[[float], bool] | None) -> str:
    if ok is None or value is None or value != value:  # NaN: nothing measured
        return "-"
    return "PASS" if ok(value) else "FAIL"


def _row(
    measure: str,
    result: str,
    value: float | None,
    target: str = "-",
    ok: Callable[[float], bool] | None = None,
) -> Row:
    return Row(measure, result, target, _verdict(value, ok), value)


def _p(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _fmt_ms(value: float | None, n: int) -> str:
    return "-" if value is None else f"{value:.0f} ms (n={n})"


def table_rows(tally: Tally, *, clean: bool, concurrent: int) -> list[Row]:
    """The measures against the targets; mouth to mouth is judged on the clean line."""
    answered = _pct(tally.answered, tally.expect_answer)
    cut = _pct(tally.cut_offs, tally.pause_turns)
    stops = _pct(tally.false_stops, tally.backchannels_judged)
    tails = tally.tails_ms
    lat = tally.latencies_ms
    dead = tally.dead_air_turns + tally.dead_air_in_replies
    pauses = [p for p in tally.backchannel_pauses_ms if p > 0]
    # A stopped reply costs the rest of it; a pause, the silence the caller hears.
    costly = tally.false_stops + sum(p > COSTLY_PAUSE_MS for p in pauses)
    rows = [
        _row(
            "turns answered",
            _ratio(tally.answered, tally.expect_answer),
            answered,
            ">= 98 %",
            lambda v: v >= 98,
        ),
        _row(
            "talk-over (bot onsets over the caller)",
            str(tally.talk_over),
            tally.talk_over,
            "0",
            lambda v: v == 0,
        ),
        _row(
            "of it, a held bot playing on lowered (informative)",
            str(tally.talk_over_lowered),
            None,
        ),
        _row(
            "cut-offs in pauses",
            _ratio(tally.cut_offs, tally.pause_turns),
            cut,
            "<= 5 %",
            lambda v: v <= 5,
        ),
        _row(
            "readings heard whole",
            f"{tally.readings_whole}/{tally.readings}",
            _pct(tally.readings_whole, tally.readings),
            "all",
            lambda v: v == 100,
        ),
        _row(
            "false stops on backchannels",
            _ratio(tally.false_stops, tally.backchannels_judged)
            + _not_judged(tally.backchannels, tally.backchannels_judged),
            stops,
            "<= 5 %",
            lambda v: v <= 5,
        ),
        _row(
            f"backchannels costing the caller > {COSTLY_PAUSE_MS:.0f} ms of reply",
            _ratio(costly, tally.backchannels_judged),
            _pct(costly, tally.backchannels_judged),
            "<= 5 %",
            lambda v: v <= 5,
        ),
        _row(
            "bot pauses at a backchannel (informative)",
            f"{len(pauses)} paused"
            + (f", p50 {_p(pauses, 50):.0f} ms, longest {max(pauses):.0f} ms" if pauses else ""),
            None,
        ),
        _row(
            "reply under full level at a backchannel (informative)",
            _spread(tally.backchannel_lowered_ms),
            None,
        ),
        _row(
            "bot audio after an interruption, p50",
            _fmt_ms(_p(tails, 50), len(tails)) + _not_judged(tally.interruptions, len(tails)),
            _p(tails, 50),
            "<= 250 ms",
            lambda v: v <= 250,
        ),
        _row(
            "bot audio after an interruption, p90",
            _fmt_ms(_p(tails, 90), len(tails)),
            _p(tails, 90),
            "<= 400 ms",
            lambda v: v <= 400,
        ),
        _row(
            "of it at full level, p50 / p90 (informative)",
            _spread(tally.tails_full_ms),
            None,
        ),
        _row(
            "dead air over 2 s",
            f"{dead} ({tally.dead_air_turns} after turns, {tally.dead_air_in_replies} in replies)",
            dead,
            "0",
            lambda v: v == 0,
        ),
        _row(
            "underruns (dry 20 ms ticks)",
            f"{tally.underruns} ({tally.underrun_ms:.0f} ms)",
            tally.underruns,
            "0",
            lambda v: v == 0,
        ),
    ]
    p50: tuple[str, Callable[[float], bool] | None]
    p90: tuple[str, Callable[[float], bool] | None]
    if concurrent > 1:
        p50 = ("-", None)
        p90 = ("<= 1500 ms", lambda v: v <= 1500) if clean else ("-", None)
    elif clean:
        p50 = ("<= 700 ms", lambda v: v <= 700)
        p90 = ("<= 1000 ms", lambda v: v <= 1000)
    else:
        p50 = p90 = ("-", None)
    rows += [
        _row("mouth to mouth, p50", _fmt_ms(_p(lat, 50), len(lat)), _p(lat, 50), *p50),
        _row("mouth to mouth, p90", _fmt_ms(_p(lat, 90), len(lat)), _p(lat, 90), *p90),
        _row(
            "calls failed",
            f"{tally.failed_calls}/{tally.calls}",
            tally.failed_calls,
            "0",
            lambda v: v == 0,
        ),
        _row(
            "protocol violations",
            str(tally.protocol_violations),
            tally.protocol_violations,
            "0",
            lambda v: v == 0,
        ),
    ]
    return rows


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"p50 {_p(values, 50):.0f} ms, p90 {_p(values, 90):.0f} ms (n={len(values)})"


def _not_judged(spoken: int, judged: int) -> str:
    missed = spoken - judged
    return f"; {missed} not over bot audio" if missed else ""


def print_table(title: str, rows: Sequence[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("measure")
    table.add_column("result", justify="right")
    table.add_column("target", justify="right")
    table.add_column("PASS/FAIL")
    for row in rows:
        style = {"PASS": "green", "FAIL": "red"}.get(row.verdict, "")
        verdict = f"[{style}]{row.verdict}[/]" if style else row.verdict
        table.add_row(row.measure, row.result, row.target, verdict)
    # Wide enough that a log or a pipe (80 columns by default) keeps one row a line.
    Console(highlight=False, width=max(110, Console().width)).print(table)
