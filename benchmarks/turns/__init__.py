"""`python -m benchmarks turns`: how well the bot takes turns, judged from the caller's
side only.

Real calls through the Twilio Media Streams protocol (ops.simulate) against the bot,
on scripts this package writes (SCRIPTS, in `script.py`): questions short and of one or two
words, sentences with a 0.5-1.5 s pause in the middle, backchannels over long replies,
interruptions early, mid-reply and late with a real correction, 30-60 s readings with
natural pauses (espeak and Piper voices, two rates each), farewells; each on a clean
line, a speakerphone (echo -10 dB @ 150 ms) and a cafe (babble at 15 dB SNR). Nothing is
asked of the server: every figure comes from what the simulated caller said (the script
and the simulator's spans), heard (BotEar's utterances), and what the simulated Twilio
received (`clear`s, its playout buffer).

All times are ms at the caller's ear on the simulator's clock (ms since `start`).
A bot *utterance* is heard bot audio (20 ms frames above -45 dBFS) with no silence of
300 ms or more inside; its start is a bot *onset*. A caller turn spans its first to
its last speech sample (the voice is trimmed), scripted pauses included. Turns that
*expect an answer* are every kind but backchannels.

- turn answered: a turn that expects an answer is followed by a bot onset at or after
  its last speech sample and before the caller's next turn starts (for the caller's
  last turn, within ANSWER_WINDOW_MS = 5 s). A turn the call never got to say (the
  call failed or ended early) counts as not answered. A reply that began inside the
  turn and ran over its end is not an answer to the whole turn.
- talk-over: a bot onset while the caller is speaking or inside a caller turn's
  scripted internal pause, i.e. inside any caller turn's span [first, last sample);
  every such onset counts once. Of them, those whose audio does not reach the bot's
  full level within 200 ms are reported apart (informative): a bot lowered under the
  caller's words (HOLD_DUCK_DB) that plays on in their pause, not a reply starting.
- cut-off in a pause: a pause turn (a sentence with a scripted 0.5-1.5 s pause in the
  middle) in which a bot onset lands after the pause began and before the turn's end:
  the bot took the pause for the end of the turn (its audio may reach the ear only
  after the caller resumed, the reply's latency later). Reported as count / pause
  turns; the JSON also says whether the onset was inside the pause itself.
- reading heard whole: a long reading during which (after its first sample, before its
  last) no bot audio at all was heard. Its onsets also count as talk-over.
- false stop on a backchannel: judged for backchannels spoken while a bot utterance was
  in progress (the script holds each one back until Twilio's buffer holds >= 3 s of
  unplayed reply, so an uncleared reply surely goes on). False stop if (a) no bot audio
  is heard within BACKCHANNEL_WINDOW_MS = 1.5 s after the backchannel's end, or (b) a
  `clear` arrived between the backchannel's onset and 1.5 s after its end and no bot
  audio is heard within 1.5 s after that clear (or after the backchannel's end, if
  later). A silence in the reply around the backchannel that ends within the window is
  not a false stop: its length is reported separately (informative). A caller waiting
  to backchannel or interrupt over a reply that ends first (2 s of bot silence, nothing
  queued) leaves it unsaid, as a person would, and goes on: such turns are neither
  judged nor counted as answered or not (SmolLM2 answers "a long story" in a few
  sentences at times; the caller then sat out its 10 s of patience, counted as dead air).
- bot audio after an interruption: from the interruption's speech onset (the first
  voiced sample of the caller's interrupting utterance) to the end of the bot
  utterance in progress at that onset, i.e. the last bot audio heard before >= 300 ms
  of bot silence; p50 and p90 over the interruptions spoken over bot audio. Early is
  0.5 s into the reply, mid 2 s, late >= 3 s in with 1.2-2.5 s of reply left in
  Twilio's buffer (all hold back until >= 1 s of reply is left there).
- dead air: (1) after a turn that expects an answer ends, no bot audio at all during
  the next DEAD_AIR_MS = 2 s while the caller stays silent (once per turn); (2) a
  silence of more than 2 s between two bot utterances that no answer-expecting caller
  turn overlaps (a silence inside a bot reply; backchannels do not take the floor).
- underruns: the simulated Twilio's buffer ran dry in the middle of a bot utterance and
  more audio came within 200 ms (TwilioPlayout's definition); counted as its dry
  20 ms ticks (CallReport.underruns), with their total length.
- mouth to mouth: a turn's last speech sample to the bot onset that answered it
  (answered turns only); the targets hold on the clean line.

Lanes: `--calls N` dials N callers at once, each in its own thread and event loop,
each working through every (line, script) call of the plan, rotated so the lanes are
on different scripts; lanes start 2 s apart. `--calls 1` runs the plan once in order.

The package, along its seams: `script` (the scripts, the line conditions, the caller's
audio), `calls` (placing the calls, in lanes, and the command), `scoring` (one call
judged against its script) and `report` (the measures against their targets).
"""

from __future__ import annotations

from benchmarks.turns.calls import add_parser, bench_turns
from benchmarks.turns.report import Row, print_table, table_rows
from benchmarks.turns.scoring import Tally, TurnScore, score_call, score_unplaced
from benchmarks.turns.script import (
    EXPECTS_ANSWER,
    LINES,
    SCRIPTS,
    Gap,
    Kind,
    Say,
    Script,
    TurnFacts,
    compose,
    prepare,
    read_aloud,
)

__all__ = [
    "EXPECTS_ANSWER",
    "LINES",
    "SCRIPTS",
    "Gap",
    "Kind",
    "Row",
    "Say",
    "Script",
    "Tally",
    "TurnFacts",
    "TurnScore",
    "add_parser",
    "bench_turns",
    "compose",
    "prepare",
    "print_table",
    "read_aloud",
    "score_call",
    "score_unplaced",
    "table_rows",
]
