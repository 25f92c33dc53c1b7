"""The duplex benchmarks' arithmetic: silences at the ear, unit-time buckets."""

from __future__ import annotations

import math

from benchmarks.duplex import _silences_after, _unit_summary
from ops.simulate import CallReport


def report_hearing(*utterances: tuple[float, float]) -> CallReport:
    return CallReport(call_sid="CA1", stream_sid="MZ1", twiml="", bot_utterances=list(utterances))


def test_silences_count_from_the_death_to_each_next_utterance() -> None:
    report = report_hearing((0, 2000), (5000, 6000), (6400, 7000), (8000, 9000))
    # Died at 5500 mid-utterance: the gaps are 6000→6400 and 7000→8000.
    assert _silences_after(report, 5500) == [0.0, 400.0, 1000.0]
    # Died in a silence: the wait for the next utterance counts.
    assert _silences_after(report, 3000) == [2000.0, 400.0, 1000.0]
    assert _silences_after(report, 9500) == []


def test_unit_summary_counts_units_over_their_length_and_the_p99_bucket() -> None:
    inf = math.inf
    before = {0.1: 5.0, 0.5: 8.0, 1.0: 10.0, 2.0: 10.0, inf: 10.0}
    after = {0.1: 85.0, 0.5: 105.0, 1.0: 108.0, 2.0: 110.0, inf: 110.0}
    summary = _unit_summary(before, after, unit_s=1.0)
    assert summary == {"units": 100, "units_over_length": 2, "unit_p99_under_ms": 2000}
    assert _unit_summary(after, after, 1.0)["units"] == 0
