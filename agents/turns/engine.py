"""The turn-taking engine: whose turn it is, decided from what was heard and played.

Pure and clocked in samples of the front end's 16 kHz output: it starts no task, reads
no clock and touches no model. Its driver (the in-process cascade agent, the duplex
`cascade` backend) feeds it what happened — front-end frames with their speech events,
end-of-turn evaluations, what the bot is doing — and carries out the typed decisions it
returns: evaluate the turn so far, commit it and reply, ask the caller to repeat, hold
the bot's audio, resume it, or clear it and cut the bot's turn to what was heard.

Over the bot, the caller's first loud words HOLD the bot (what is queued at Twilio is
cleared and kept) so it stops within a few frames of their onset. A backchannel ("mhm",
"okay") or a noise RESUMES it from where the caller stopped hearing it; speech that goes
on, or short words that are not a backchannel ("stop", "no, Saturday"), make it an
interruption: the rest is dropped and the caller has the turn.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from agents.turns.text import (
    addresses_the_listener,
    announces_more,
    asks_a_question,
    claims_the_floor,
    is_backchannel,
    is_farewell,
    looks_unfinished,
    makes_a_request,
    only_trails_off,
    opens_an_interruption,
    sentences,
    sounds_finished,
    takes_the_turn,
)
from callevents import (
    Backchannel,
    CallEvent,
    EchoIgnored,
    EndOfTurn,
    EventSink,
    NotSpeech,
    PatienceRaised,
    SpeechStart,
    SpeechStop,
    TurnCapped,
)
from media.vad import SpeechStarted, SpeechStopped, VadEvent

__all__ = [
    "Answer",
    "Clear",
    "Decision",
    "DropEvaluation",
    "Evaluate",
    "Evaluation",
    "Frame",
    "Hearing",
    "Hold",
    "IllegalTransition",
    "Overlap",
    "Reopen",
    "Reprompt",
    "Resume",
    "TurnEngine",
    "TurnState",
    "TurnTaking",
]

RATE = 16000


@dataclass(frozen=True, slots=True)
class TurnTaking:
    """Every turn-taking setting; both agents read all of them."""

    end_of_turn_threshold: float = 0.5
    min_silence_ms: int = 200  # a finished-sounding turn is answered after this pause
    max_silence_ms: int = 1000  # ...and any turn after this one
    # A turn whose words stop where a sentence cannot ("a table for", "and...") is given
    # this long: people pause mid-sentence for up to ~1.5 s to think or read. No longer:
    # a finished turn Whisper mishears as unfinished (espeak's "Thanks, that's all.
    # Bye!" as "...now I'll buy...", "and met all by") then still gets its reply inside
    # 2 s; at 2 s every such turn was dead air (1 in 3 bench turns runs).
    unfinished_max_silence_ms: int = 1700
    # ...and its reply is drafted from this far into that wait: should the wait run
    # out, the first clause is written and spoken by then (first token ~0.3 s, Piper's
    # first clause ~0.35 s), and the hanging turn is not 2.4 s of dead air.
    unfinished_draft_after_ms: int = 900
    # A statement (not a question) waits this long: a sentence can be the first of
    # several...
    statement_min_silence_ms: int = 700
    # ...and one it is sure of, unless it is a short answer of this many words at most.
    short_answer_words: int = 3
    # Someone talking for this long (reading out, explaining) pauses between sentences
    # that each sound finished: only a question, or this much quiet, ends the turn...
    long_turn_s: float = 3.0
    long_turn_min_silence_ms: int = 1000
    # ...and this much once they have said this many sentences, or said they will go
    # on ("let me finish"): a reader's pauses run to ~1 s. Not sooner: two sentences
    # are as often a statement and its afterthought ("...a table for you. Six people
    # at noon."), and 1.2 s there put a quarter of 4 concurrent calls' turns past 1.5 s.
    reading_sentences: int = 3
    reading_min_silence_ms: int = 1200
    # Speech over the bot this long is an interruption whatever its words (backchannels
    # like "uh-huh, yeah" run to ~900 ms; the bot is held from the first words anyway).
    barge_in_min_speech_ms: int = 1000
    # Loud speech over the bot this long holds the bot's audio (within ~0.15 s of onset).
    hold_min_speech_ms: int = 60
    # ...and this long while the echo canceller is still learning the echo path (the
    # bot's first ~2 s on a line with echo): its echo comes back in runs of up to ~550 ms.
    hold_unsettled_ms: int = 600
    # Short speech over the bot (a held bot) that is shorter than this and whose words
    # are a backchannel lets the bot go on.
    backchannel_max_ms: int = 1200
    # ...but not into a pause this short: "No wait, | actually..." pauses at the comma
    # for 200-400 ms (heard again ~100 ms after it resumes), and Whisper can make a
    # hum's words of "No wait".
    resume_min_silence_ms: int = 450
    # ...and this long after words that are no backchannel (Whisper's "I'm" for "No
    # wait,", whose comma pause ran 500 ms in bench turns): they may open a sentence.
    # No longer: a hold on the bot's own leaked "I'm" then kept it quiet ~1 s, and a
    # caller takes a bot that quiet for done (bench turns' caller speaks 0.7-0.9 s in).
    resume_after_words_ms: int = 600
    # Words judged a backchannel, or too short to take the turn ("Six.", "Yes."), whose
    # resumed reply then plays out within this much audio were said over its last
    # words: "For how many?" answered as it ends, or a quick "Yes." into Piper's 110-240
    # ms of trailing silence, which the bot is held on. They are the caller's turn, and
    # answered once the reply has played out; resumed and played out, they were lost.
    # A word or two, no more: an "Okay." over "...at seven." is no answer to a "Shall I
    # book it?" that follows (bench turns' "mhm"s come with >= 3 s still queued).
    reply_end_words_ms: int = 600
    # ...and only within this long of the words' end: a reply that stalls between two
    # clauses (a slow LLM, a busy box) was not ending when they were said.
    reply_end_words_within_ms: int = 2000
    # A caller who goes on after a pause the bot took for their turn's end (before its
    # reply was heard, or cutting into the reply's first `continuation_heard_ms`: too
    # soon to be answering its words, and not with "No wait," or "Sorry,") has shown
    # how long they pause. Their next turn carries on from the answered one (a reader's
    # pauses stay a reader's), and from then on no statement is answered before that
    # pause and `patience_margin_ms` more, up to `patience_max_ms`. Questions stay
    # quick. A reader cut into kept being talked over: "...ring the bell | twice,
    # because..." was answered in both pauses. Not 600 ms: on the echo line "a table for
    # | six people" was answered 0.74 s into the 1.5 s pause, and the caller went on
    # 0.76 s into the reply; babble's "a cable for you." 0.7-0.9 s in.
    continuation_heard_ms: int = 1000
    # ...and resumed within this much of the turn's end: a mid-sentence pause runs to
    # ~1.5 s (the hanging words' wait). A caller answering a short reply ("For how
    # many?" "Six.") as it ends comes ~1.9 s after their turn (700 ms wait, first audio,
    # a second of reply) and must not be taken for one who paused that long.
    continuation_max_pause_ms: int = 1700
    # A caller who resumes this soon after the Answer, before any reply is heard, went
    # on (later, "Hello?" to a slow reply is no pause of theirs).
    reopen_continuation_ms: int = 600
    patience_margin_ms: int = 250
    patience_max_ms: int = 1500
    echo_margin_db: float = 12.0
    # An interruption stands this far above the call's background (babble, a TV): the
    # background's own bursts, which speech detection may also call speech, never stop
    # the bot.
    barge_in_over_floor_db: float = 10.0
    preroll_ms: int = 300
    # A turn this long with no pause at all is judged without one at this length, and
    # again every `recheck_s`; past the hard cap it is answered whatever they say.
    max_utterance_s: float = 20.0
    recheck_s: float = 5.0
    hard_max_utterance_s: float = 60.0
    # Speech shorter than this is not a turn when its transcript is empty (a cough).
    min_reprompt_speech_ms: int = 250
    digit_timeout_ms: int = 800


class TurnState(Enum):
    LISTENING = "listening"  # nobody talking, nothing owed
    CALLER = "caller"  # the caller has the floor (speaking or pausing)
    REPLYING = "replying"  # the caller's turn is committed; the reply is not heard yet
    BOT = "bot"  # the bot is talking (or about to, from the caller's side)
    OVERLAP = "overlap"  # the caller started speaking over the bot
    HELD = "held"  # ...loud enough that the bot's audio is stopped while we decide


class Hearing(Enum):
    """What the transcript's evidence says about an utterance."""

    HEARD = "heard"  # words to answer
    UNCLEAR = "unclear"  # there was speech but no reliable words: ask again
    NOTHING = "nothing"  # no speech after all (noise, a cough, a click)


_ALLOWED: dict[TurnState, frozenset[TurnState]] = {
    TurnState.LISTENING: frozenset({TurnState.CALLER, TurnState.BOT, TurnState.REPLYING}),
    TurnState.CALLER: frozenset({TurnState.LISTENING, TurnState.REPLYING, TurnState.BOT}),
    TurnState.REPLYING: frozenset(
        {TurnState.CALLER, TurnState.BOT, TurnState.LISTENING, TurnState.REPLYING}
    ),
    TurnState.BOT: frozenset(
        {TurnState.LISTENING, TurnState.OVERLAP, TurnState.REPLYING, TurnState.BOT}
    ),
    TurnState.OVERLAP: frozenset(
        {TurnState.BOT, TurnState.HELD, TurnState.CALLER, TurnState.LISTENING, TurnState.REPLYING}
    ),
    TurnState.HELD: frozenset(
        {TurnState.BOT, TurnState.CALLER, TurnState.LISTENING, TurnState.REPLYING}
    ),
}


class IllegalTransition(RuntimeError):
    pass


# --- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One batch of front-end output, with what the bot was doing meanwhile."""

    end: int  # 16 kHz sample just after this batch
    samples: int
    events: Sequence[VadEvent] = ()
    level_db: float = 0.0  # the caller's side, echo removed
    noise_floor_db: float = -120.0
    echo_settled: bool = True
    bot_audible: bool = False  # bot audio is at the caller's ear now
    bot_level_db: float = -120.0  # its level there


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The end-of-turn model and the transcript on the utterance up to `end`."""

    end: int
    probability: float
    text: str
    hearing: Hearing
    capped: bool = False
    # Whisper's own evidence behind `hearing`, for the record (agents/cascade/stt.py).
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0


# --- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Evaluate:
    """Judge the utterance [start, end): end-of-turn model and transcript, in the background."""

    start: int
    end: int
    capped: bool = False
    speech_ms: int = 0  # of it, speech (pauses excluded): evidence for the transcript


@dataclass(frozen=True, slots=True)
class DropEvaluation:
    """The caller went on: whatever evaluation is running is void."""


@dataclass(frozen=True, slots=True)
class Answer:
    """Commit the caller's turn [start, end) with `text`, and reply to it."""

    text: str
    start: int
    end: int
    silence_ms: int
    farewell: bool = False  # the caller is saying goodbye: a goodbye is the answer


@dataclass(frozen=True, slots=True)
class Reprompt:
    """The caller spoke and was not made out: ask them, briefly, to say it again."""

    reason: str
    speech_ms: int
    end: int
    silence_ms: int = 0


@dataclass(frozen=True, slots=True)
class Reopen:
    """The caller went on before the reply was heard: drop the reply. With `restore`,
    the turn it answered is withdrawn and the utterance continues from `start`."""

    start: int
    restore: bool


@dataclass(frozen=True, slots=True)
class Hold:
    """Stop the bot's audio at the caller's ear now, keeping the rest."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Play the rest of the held audio (and the reply still being made)."""

    held_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class Clear:
    """An interruption: drop the rest of the reply; the bot's turn is what was heard."""

    reason: str


Decision = Evaluate | DropEvaluation | Answer | Reprompt | Reopen | Hold | Resume | Clear


@dataclass(slots=True)
class Overlap:
    """Caller speech that started over the bot, and whether it is loud enough to hold
    the bot: the one rule the engine and the duplex gateway both apply."""

    start: int
    loud: int = 0  # samples loud like a caller (above the echo and the room)
    over_bot: int = 0  # samples while the bot was audible
    stopped: int | None = None  # where the speech stopped, when it has
    held_at: int | None = None
    last_loud: int | None = None  # the end of the last frame loud like a caller
    restarted: int | None = None  # where speech last began again after a stop

    def count(self, frame: Frame, speaking: bool, cfg: TurnTaking) -> None:
        if frame.bot_audible:
            self.over_bot += frame.samples
        above_echo = frame.level_db >= frame.bot_level_db - cfg.echo_margin_db
        above_room = frame.level_db >= frame.noise_floor_db + cfg.barge_in_over_floor_db
        if speaking and (above_echo or not frame.bot_audible) and above_room:
            self.loud += frame.samples
            self.last_loud = frame.end

    def count_from_onset(self, frames: Iterable[Frame], cfg: TurnTaking) -> None:
        """Count the frames between the speech's onset and the detector saying so (~80 ms
        later), so a hold is timed from what the caller said, not from when it was
        noticed: counted from the notice, the bot started its next sentence 140 ms into
        a caller's "Yeah." in its pause (bench turns, echo line, the same spot in two
        runs), the `clear` one frame late."""
        for frame in frames:
            if frame.end - frame.samples // 2 > self.start:
                self.count(frame, True, cfg)

    def holds(self, position: int, echo_settled: bool, cfg: TurnTaking) -> bool:
        """Loud for long enough, and for a third of the speech at least."""
        # Until the echo canceller has found the echo path, the bot's echo gets through
        # at its raw level (a speakerphone's is ~10 dB under the bot, inside the echo
        # margin) in word-long runs: only longer speech is surely the caller. A hold on
        # echo would also re-send the audio and set the canceller back.
        hold_ms = cfg.hold_min_speech_ms if echo_settled else cfg.hold_unsettled_ms
        hold_at = _samples(hold_ms)
        return self.loud >= hold_at and self.loud * 3 >= position - self.start


@dataclass(slots=True)
class _EndWords:
    """Words over a held reply that let it go on: the caller's turn if it ends soon."""

    result: Evaluation
    start: int
    heard: int = 0  # samples of the reply audible since it resumed


@dataclass(frozen=True, slots=True)
class _Said:
    """What a caller turn amounted to, for the turn that carries on from it."""

    end: int  # where its speech ended
    sentences: int
    length_s: float
    announced: bool  # "let me finish": more is coming
    at: int = 0  # where it was answered


class RecentFrames:
    """The last few frames: what a speech onset the detector reports late looked like."""

    def __init__(self, keep_ms: int = 400) -> None:
        self._frames: deque[Frame] = deque()
        self._keep = _samples(keep_ms)

    def add(self, frame: Frame) -> None:
        self._frames.append(frame)
        while self._frames and self._frames[0].end <= frame.end - self._keep:
            self._frames.popleft()

    def __iter__(self) -> Iterator[Frame]:
        return iter(self._frames)


class TurnEngine:
    """One call's turn taking. Feed it; do what it returns."""

    def __init__(self, config: TurnTaking, *, emit: EventSink | None = None) -> None:
        self.cfg = config
        self._emit_to = emit
        self.state = TurnState.LISTENING
        self.position = 0
        self.speaking = False  # the caller's speech run is on
        self._speech_start = 0
        self._cut_in = False  # this turn took the floor from the bot (see _interrupt)
        self._utterance_start = 0  # first sample of the caller's turn (with preroll)
        self._speech_in_turn = 0  # samples of speech in the turn, pauses excluded
        self._speech_end: int | None = None
        self._evaluating: Evaluate | None = None
        self._result: Evaluation | None = None
        self._next_cap_check = 0
        self._overlap: Overlap | None = None
        self._recent = RecentFrames()
        self._bot_busy = False  # a reply is being made or played (driver's fact)
        self._committed = False  # REPLYING answers a caller turn (vs a greeting...)
        # HELD and judged a backchannel at this stop; the bot resumes after a quiet moment
        # of this many ms.
        self._resume_after: int | None = None
        self._resume_wait_ms = config.resume_min_silence_ms
        self._answered: _Said | None = None  # the caller turn the bot is answering
        # Samples of the answering reply audible so far (as the playout clock has it:
        # from when Twilio has it to play), holds excluded.
        self._heard = 0
        self._resumed_at: int | None = None  # the caller's first speech over that reply
        self._continues: _Said | None = None  # the answered turn an overlap may go on
        # The pause a turn carried on from the answered one showed: learnt once its
        # words say it goes on (and is no "No wait,").
        self._carried_pause: int | None = None
        self._carried: _Said | None = None  # the answered turn this turn goes on from
        self._patience_ms = 0  # the caller's longest pause the bot answered into, and more
        self._end_words: _EndWords | None = None
        self._last_reply = False  # the reply ends or hands over the call

    # --- facts from the driver -----------------------------------------------------------

    def reply_started(self, *, last: bool = False) -> None:
        """A reply (answer, greeting, reprompt...) is under way; `last`: a farewell or a
        transfer's announcement, after which words said over its end are not answered."""
        self._bot_busy = True
        self._end_words = None
        self._last_reply = last
        if self.state in (TurnState.LISTENING, TurnState.CALLER):
            self._to(TurnState.REPLYING)

    def reply_audible(self) -> None:
        """The reply's first audio went out: from now on it is the bot's turn."""
        self._committed = False
        if self.state is TurnState.REPLYING:
            self._to(TurnState.BOT)

    def reply_done(self) -> None:
        """Nothing more will be sent for this reply (finished, failed or cancelled)."""
        self._bot_busy = False

    def caller_reset(self) -> None:
        """The caller's input was answered some other way (keypad): forget the utterance."""
        self._drop_utterance()
        self._answered = None
        self._end_words = None
        if self.state in (TurnState.CALLER, TurnState.OVERLAP):
            self._to(TurnState.LISTENING)

    # --- caller audio --------------------------------------------------------------------

    def frame(self, frame: Frame) -> list[Decision]:
        out: list[Decision] = []
        self.position = frame.end
        # `frame.bot_audible` was measured before this frame's decisions: a bot resumed
        # in this frame is not audible in it yet, and is not played out by that.
        state_before = self.state
        if frame.bot_audible and self._answered is not None:
            self._heard += frame.samples
        if (words := self._end_words) is not None:
            if frame.bot_audible:
                words.heard += frame.samples
            late = self.position - words.result.end > _samples(self.cfg.reply_end_words_within_ms)
            if words.heard > _samples(self.cfg.reply_end_words_ms) or late:
                self._end_words = None  # the reply went on: they were a backchannel
        for event in frame.events:
            if isinstance(event, SpeechStarted):
                self._on_start(event.sample, frame, out)
            elif isinstance(event, SpeechStopped):
                self._on_stop(event.sample, out)
        if self.speaking:
            self._speech_in_turn += frame.samples
        if self._resume_after is not None and self.state is TurnState.HELD:
            self._resume_after_pause(self._resume_after, out)
        if self.state in (TurnState.OVERLAP, TurnState.HELD):
            self._overlap_frame(frame, out)
        elif (
            self.state in (TurnState.BOT, TurnState.REPLYING)
            and self.state is state_before
            and not frame.bot_audible
            and not self._bot_busy
        ):
            # The reply played out, or failed with nothing said.
            self._committed = False
            self._answered = None
            self._to(TurnState.LISTENING)
            if self._end_words is not None:
                self._answer_end_words(out)
        elif self.state is TurnState.CALLER and self.speaking:
            self._check_length_cap(out)
        self._maybe_end_turn(out)
        self._recent.add(frame)
        return out

    def _on_start(self, sample: int, frame: Frame, out: list[Decision]) -> None:
        self.speaking = True
        self._speech_start = sample
        self._end_words = None  # they went on: this speech is judged in its turn
        self._emit(SpeechStart(sample=sample))
        if self._evaluating is not None or self._result is not None:
            if not (self._evaluating and self._evaluating.capped):
                self._drop_evaluation(out)
        match self.state:
            case TurnState.LISTENING:
                self._begin_utterance(sample)
                self._to(TurnState.CALLER)
            case TurnState.CALLER:
                pass  # a pause inside the turn ended
            case TurnState.REPLYING:
                # They went on before the reply was heard: the reply is void and their
                # answered turn reopens with all its audio (any other reply is simply
                # dropped, and this is a new turn).
                if not self._committed:
                    self._begin_utterance(sample)
                elif self._answered is not None and self._soon_after_answer(sample):
                    # (not a caller prompting a slow reply: "Hello?" 1.8 s on)
                    self._learn_pause(sample - self._answered.end)
                self._answered = None
                out.append(Reopen(start=self._utterance_start, restore=self._committed))
                self._committed = False
                self._to(TurnState.CALLER)
            case TurnState.BOT:
                self._overlap = Overlap(start=sample)
                self._overlap.count_from_onset(self._recent, self.cfg)
                self._continues = self._continuation(sample, frame)
                self._begin_utterance(sample)
                self._to(TurnState.OVERLAP)
            case TurnState.OVERLAP | TurnState.HELD:
                assert self._overlap is not None
                self._overlap.stopped = None  # one overlap, in pieces
                self._overlap.restarted = sample

    def _on_stop(self, sample: int, out: list[Decision]) -> None:
        self.speaking = False
        self._speech_end = sample
        self._emit(SpeechStop(sample=sample))
        match self.state:
            case TurnState.CALLER:
                self._evaluate(sample, out)
            case TurnState.OVERLAP:
                assert self._overlap is not None
                # Never loud enough to hold the bot: the bot's echo, or the room.
                speech_ms = _ms(sample - self._overlap.start)
                if self._overlap.loud:
                    self._emit(Backchannel(speech_ms=speech_ms, text=""))
                else:
                    self._emit(EchoIgnored(speech_ms=speech_ms))
                self._end_overlap(TurnState.BOT)
            case TurnState.HELD:
                assert self._overlap is not None
                self._overlap.stopped = sample
                # Short: a backchannel, or a short interruption ("stop", "no"). Its
                # words decide; the bot stays held meanwhile.
                self._evaluate(sample, out)
            case _:
                pass

    def _overlap_frame(self, frame: Frame, out: list[Decision]) -> None:
        overlap = self._overlap
        assert overlap is not None
        speech = self.position - overlap.start
        if self.state is TurnState.OVERLAP:
            if not (frame.bot_audible or self._bot_busy):
                # The bot finished while the caller was speaking: the caller's turn, if
                # they were loud like a caller for a third of the overlap (the tail of
                # the bot's own echo runs past its end, and is not).
                if overlap.loud * 3 >= overlap.over_bot and self.speaking:
                    self._overlap = None
                    self._carry_on(overlap.start)
                    self._to(TurnState.CALLER)
                return
            overlap.count(frame, self.speaking, self.cfg)
            if overlap.holds(self.position, frame.echo_settled, self.cfg):
                overlap.held_at = self.position
                self._to(TurnState.HELD)
                out.append(Hold())
                return
        if self.state is TurnState.HELD:
            overlap.count(frame, self.speaking, self.cfg)  # when they were last loud
        if self.state is TurnState.HELD and self.speaking:
            factor = 1 if frame.echo_settled else 2
            if speech >= _samples(self.cfg.barge_in_min_speech_ms) * factor:
                self._interrupt("barge_in", out)

    def _interrupt(self, reason: str, out: list[Decision]) -> None:
        """A real interruption: the bot's turn ends; the caller's goes on."""
        out.append(Clear(reason=reason))
        onset = None if self._overlap is None else self._overlap.start
        self._overlap = None
        self._resume_after = None
        self._bot_busy = False
        # Someone who cuts in mostly goes on after their first words ("No wait, |
        # actually..."), which need not be words we know: under babble Whisper made "No
        # way." of "No wait," and the bot answered it as a short answer into the pause.
        self._cut_in = True
        if onset is not None:
            self._carry_on(onset)
        self._to(TurnState.CALLER)
        idle = self._evaluating is None and self._result is None
        if not self.speaking and self._speech_end is not None and idle:
            self._evaluate(self._speech_end, out)

    def _continuation(self, onset: int, frame: Frame) -> _Said | None:
        """The answered turn that speech starting at `onset` over the reply may go on:
        the caller resumed too soon after their pause to be answering the reply (counted
        in reply audio they heard, so a hold on "twice," and a resume before "because..."
        do not use the window up)."""
        answered = self._answered
        if answered is None:
            return None
        if self._resumed_at is None:
            self._resumed_at = onset
        if self._resumed_at - answered.end > _samples(self.cfg.continuation_max_pause_ms):
            return None
        since_onset = sum(
            f.samples
            for f in (*self._recent, frame)
            if f.bot_audible and f.end - f.samples >= onset
        )
        heard = self._heard - since_onset
        return answered if heard <= _samples(self.cfg.continuation_heard_ms) else None

    def _soon_after_answer(self, onset: int) -> bool:
        answered = self._answered
        assert answered is not None
        return onset - answered.at <= _samples(self.cfg.reopen_continuation_ms)

    def _carry_on(self, onset: int) -> None:
        """The caller took the floor with speech that began at `onset`: if it may go on
        from the answered turn, carry that turn, and its pause until the words say
        (`_judge_carried`)."""
        if self._continues is not None:
            self._carried = self._continues
            self._carried_pause = (self._resumed_at or onset) - self._continues.end
        self._continues = None
        self._answered = None

    def _judge_carried(self, result: Evaluation) -> None:
        """A turn that cut into the reply soon after it began goes on from the answered
        turn unless its first words stop or correct the bot: an early "No wait,
        actually..." is an interruption, a turn of its own, and shows no pause."""
        pause = self._carried_pause
        if pause is None or result.hearing is not Hearing.HEARD or not result.text.strip():
            return
        self._carried_pause = None
        if opens_an_interruption(result.text):
            self._carried = None
        else:
            self._learn_pause(pause)

    def _learn_pause(self, pause: int) -> None:
        """The caller went on after a pause this long: wait that out from now on (a
        comma's pause, under a statement's usual wait, changes nothing)."""
        cfg = self.cfg
        pause_ms = _ms(pause)
        wait_ms = min(pause_ms + cfg.patience_margin_ms, cfg.patience_max_ms)
        longer = wait_ms > max(self._patience_ms, cfg.statement_min_silence_ms)
        if pause_ms <= cfg.continuation_max_pause_ms and longer:
            self._patience_ms = wait_ms
            self._emit(PatienceRaised(pause_ms=pause_ms, wait_ms=wait_ms))

    def _end_overlap(self, state: TurnState) -> None:
        self._overlap = None
        self._continues = None
        self._resume_after = None
        self._drop_utterance()
        self._to(state)

    def _check_length_cap(self, out: list[Decision]) -> None:
        """Speech that never pauses is judged at the cap, not waited on forever.

        Counted from the last pause, not the turn's start: someone reading out a minute
        of text with pauses between sentences is heard whole.
        """
        length = self.position - self._speech_start
        if length < self.cfg.max_utterance_s * RATE or self._evaluating is not None:
            return
        if self.position < self._next_cap_check:
            return
        self._next_cap_check = self.position + int(self.cfg.recheck_s * RATE)
        self._emit(TurnCapped(speech_ms=_ms(length)))
        self._evaluating = Evaluate(
            self._utterance_start, self.position, capped=True, speech_ms=_ms(self._speech_in_turn)
        )
        out.append(self._evaluating)

    # --- end of turn ---------------------------------------------------------------------

    def evaluated(self, result: Evaluation) -> list[Decision]:
        """An evaluation the engine asked for came back (stale ones are ignored)."""
        ticket = self._evaluating
        if ticket is None or ticket.end != result.end or ticket.capped != result.capped:
            return []
        self._evaluating = None
        self._result = result
        out: list[Decision] = []
        if self.state is TurnState.HELD:
            self._judge_held(result, out)
        if self.state is TurnState.CALLER:
            self._judge_carried(result)
        self._maybe_end_turn(out)
        return out

    def failed(self, end: int) -> list[Decision]:
        """The evaluation for `end` failed: the turn is over, unheard (the driver
        apologises)."""
        if self._evaluating is None or self._evaluating.end != end:
            return []
        self._evaluating = None
        self._drop_utterance()
        if self.state is TurnState.HELD:
            return self._resume("evaluation_failed")
        if self.state is TurnState.CALLER:
            self._to(TurnState.LISTENING)
        return []

    def _judge_held(self, result: Evaluation, out: list[Decision]) -> None:
        overlap = self._overlap
        assert overlap is not None
        speech_ms = _ms((overlap.stopped or self.position) - overlap.start)
        # Nothing made out of it, a backchannel's words, or a hum Whisper made words of:
        # the bot goes on. Short words that take the turn ("stop", "no, Saturday") stop
        # it; someone who means to interrupt keeps talking, and that stops it by length.
        if result.hearing is not Hearing.HEARD or (
            not takes_the_turn(result.text, speech_ms=speech_ms)
            and speech_ms <= self.cfg.backchannel_max_ms
        ):
            self._result = None
            self._emit(Backchannel(speech_ms=speech_ms, text=result.text))
            words = result.hearing is Hearing.HEARD and not is_backchannel(result.text)
            cfg = self.cfg
            if _answerable(result, cfg) and not self._last_reply:
                self._end_words = _EndWords(result, start=self._utterance_start)
            self._resume_wait_ms = cfg.resume_after_words_ms if words else cfg.resume_min_silence_ms
            self._resume_after = overlap.stopped or self.position
            self._resume_after_pause(self._resume_after, out)
            return
        # Words that are not a backchannel: the caller is taking the turn.
        self._interrupt("short_interruption", out)

    def _resume_after_pause(self, stopped: int, out: list[Decision]) -> None:
        """Resume a backchannel's held bot once the caller has been quiet long enough
        after the `stopped` that was judged.

        Quiet is "nothing loud like a caller": babble that speech detection calls speech
        does not keep the bot held. The caller speaking up again does: then the overlap
        goes on, and is judged again when it stops (or interrupts by its length).
        """
        overlap = self._overlap
        assert overlap is not None
        last_loud = overlap.last_loud or stopped
        if overlap.restarted is not None and overlap.restarted > stopped:
            if last_loud > overlap.restarted:
                self._resume_after = None  # they went on after the pause
                return
        if self.position - max(stopped, last_loud) >= _samples(self._resume_wait_ms):
            out.extend(self._resume("backchannel"))

    def _resume(self, reason: str) -> list[Decision]:
        overlap = self._overlap
        assert overlap is not None
        held_ms = _ms(self.position - (overlap.held_at or self.position))
        self._end_overlap(TurnState.BOT)
        return [Resume(held_ms=held_ms, reason=reason)]

    def _maybe_end_turn(self, out: list[Decision]) -> None:
        result = self._result
        if result is None or self.state is not TurnState.CALLER:
            return
        if self.speaking and not result.capped:
            return
        silence_ms = 0 if self._speech_end is None else _ms(self.position - result.end)
        if result.capped:
            silence_ms = 0
        if not self._complete(result, silence_ms):
            if result.capped:
                self._result = None  # looked at again in recheck_s
            return
        self._result = None
        self._emit_end_of_turn(result, silence_ms)
        speech_ms = _ms(self._speech_in_turn)
        start, end = self._utterance_start, result.end
        said = self._said(result.text, end)
        self._drop_utterance()
        heard = result.hearing is Hearing.HEARD
        if heard and result.text.strip():
            self._commit(result.text.strip(), start, end, silence_ms, said, out)
        elif result.hearing is Hearing.UNCLEAR or (
            heard and speech_ms >= self.cfg.min_reprompt_speech_ms
        ):
            # Never silence after someone spoke: ask them again, in a few words.
            out.append(
                Reprompt(
                    reason=result.hearing.value,
                    speech_ms=speech_ms,
                    end=end,
                    silence_ms=silence_ms,
                )
            )
            self._to(TurnState.REPLYING)
        else:
            self._emit(NotSpeech(speech_ms=speech_ms, text=result.text))
            self._to(TurnState.LISTENING)

    def _commit(
        self,
        text: str,
        start: int,
        end: int,
        silence_ms: int,
        said: _Said,
        out: list[Decision],
        *,
        reopens: bool = True,
    ) -> None:
        """Answer the caller's turn. `reopens`: a caller going on before the reply is
        heard continues this turn from `start` (its audio is still kept)."""
        self._answered = dataclasses.replace(said, at=self.position)
        self._heard = 0
        self._resumed_at = None
        out.append(
            Answer(
                text=text, start=start, end=end, silence_ms=silence_ms, farewell=is_farewell(text)
            )
        )
        self._committed = reopens
        self._to(TurnState.REPLYING)

    def _answer_end_words(self, out: list[Decision]) -> None:
        """The reply played out soon after the words the bot was resumed over: they were
        said over its end, and are the caller's turn."""
        words = self._end_words
        assert words is not None
        self._end_words = None
        result = words.result
        silence_ms = _ms(self.position - result.end)
        self._emit_end_of_turn(result, silence_ms)
        text = result.text.strip()
        said = _Said(
            end=result.end,
            sentences=len(sentences(text)),
            length_s=(result.end - words.start) / RATE,
            announced=announces_more(text),
        )
        # Said over the bot, whose audio the driver keeps less of: a caller going on before
        # the reply is heard starts a turn of their own, and these words stay answered.
        self._commit(text, words.start, result.end, silence_ms, said, out, reopens=False)

    def _emit_end_of_turn(self, result: Evaluation, silence_ms: int) -> None:
        self._emit(
            EndOfTurn(
                probability=round(result.probability, 3),
                silence_ms=silence_ms,
                text=result.text,
                hearing=result.hearing.value,
                no_speech_prob=round(result.no_speech_prob, 3),
                avg_logprob=round(result.avg_logprob, 3),
            )
        )

    def _complete(self, result: Evaluation, silence_ms: int) -> bool:
        cfg = self.cfg
        sure = result.probability >= cfg.end_of_turn_threshold
        text = result.text
        unfinished = looks_unfinished(text)
        if result.capped:
            run_s = (result.end - self._speech_start) / RATE
            if run_s >= cfg.hard_max_utterance_s:
                return True
            return sure or (sounds_finished(text) and not unfinished)
        turn = self._said(text, result.end)
        length_s, said, announced = turn.length_s, turn.sentences, turn.announced
        reading = announced or (said >= cfg.reading_sentences and length_s >= cfg.long_turn_s)
        if reading:
            # A reader's sentence opening like a question is mostly their text ("Is it
            # open..." read out) or Whisper's fragment across a pause: under babble, "are
            # clean wager and to lemonade." (for "...and two lemonades.") was answered in
            # 240 ms, mid-reading. A reader asking says it with a rise: Whisper's "?", on
            # a question of a few words or one Smart Turn is sure of. Whisper made "...ring
            # the bell | twice" into "...ring the bell. Why?" or "...the bell, why?" in
            # four of five bench runs (tiny.en and base, every line).
            last = sentences(text)[-1] if text.strip() else ""
            asked = last.rsplit(",", 1)[-1]
            # ...and one of several words asks the listener ("can you read it back?"):
            # a reader's garble Whisper made a question of does not ("...Okay, did I
            # wrap in 12 maker tree?" for the address, espeak under babble, Smart Turn
            # 0.02, answered 250 ms into a pause in three runs of two stops).
            worded = len(asked.split()) >= 3 and addresses_the_listener(asked)
            question = last.endswith("?") and (worded or sure) and not unfinished
        else:
            question = (asks_a_question(text) or makes_a_request(text)) and not unfinished
        # How long a pause ends the turn, by what the words say. Smart Turn scores flat
        # prosody (synthetic or monotone callers, measured 0.01-0.02 on Piper questions)
        # low even on complete questions, so Whisper's punctuation leads and Smart Turn
        # can only shorten the wait.
        if result.hearing is not Hearing.HEARD:
            # No words to go on, so no hurry: asking again into a comma's pause talks
            # over the caller ("Thanks, | that's all", whose "Thanks" Whisper made "and").
            wait = cfg.statement_min_silence_ms if sure else cfg.max_silence_ms
        elif unfinished and sure and only_trails_off(text):
            # "Weather..." (Smart Turn 0.96): Whisper's ellipsis is the only sign of
            # more to come, and the voice sounded done. Waited 2 s, it was dead air.
            wait = cfg.statement_min_silence_ms
        elif unfinished:
            wait = cfg.unfinished_max_silence_ms
        elif question or is_farewell(text):
            wait = cfg.min_silence_ms
        elif (
            sure
            and len(text.split()) <= cfg.short_answer_words
            and not claims_the_floor(text)
            and not self._cut_in
        ):
            wait = cfg.min_silence_ms  # "Parking.", "Yes.", "Friday evening."
        elif sure or sounds_finished(text):
            # A statement can be the first of several sentences, and Whisper makes a
            # whole one of half a sentence ("a table for" + a pause -> "a table for
            # it.", which Smart Turn scored 0.95-0.98 on espeak in bench turns).
            wait = cfg.statement_min_silence_ms
        else:
            wait = cfg.max_silence_ms
        if length_s >= cfg.long_turn_s and not question:
            # Smart Turn being sure still counts for one long sentence ending with a
            # falling, final voice. Not after several: a reader's or an explainer's
            # pauses between sentences all sound final (Smart Turn 0.6-0.97 on Piper
            # reading an order aloud).
            if said >= cfg.reading_sentences:
                floor = cfg.reading_min_silence_ms
            elif sure and said <= 1:
                floor = cfg.statement_min_silence_ms
            else:
                floor = cfg.long_turn_min_silence_ms
            wait = max(wait, floor)
        if announced and not question:
            wait = max(wait, cfg.reading_min_silence_ms)  # "...so please let me finish."
        if not question and wait >= cfg.statement_min_silence_ms:
            wait = max(wait, self._patience_ms)
        return silence_ms >= wait

    def _said(self, text: str, end: int) -> _Said:
        """The caller's turn up to `end`, with the answered turn it carries on from."""
        own = _Said(
            end=end,
            sentences=len(sentences(text)),
            length_s=(end - self._utterance_start) / RATE,
            announced=announces_more(text),
        )
        before = self._carried
        if before is None:
            return own
        return _Said(
            end=end,
            sentences=before.sentences + own.sentences,
            length_s=before.length_s + own.length_s,
            announced=before.announced or own.announced,
        )

    def _evaluate(self, end: int, out: list[Decision]) -> None:
        self._evaluating = Evaluate(self._utterance_start, end, speech_ms=_ms(self._speech_in_turn))
        self._result = None
        out.append(self._evaluating)

    def _drop_evaluation(self, out: list[Decision]) -> None:
        if self._evaluating is not None:
            out.append(DropEvaluation())
        self._evaluating = None
        self._result = None

    # --- plumbing ------------------------------------------------------------------------

    def _begin_utterance(self, speech_start: int) -> None:
        self._utterance_start = max(0, speech_start - _samples(self.cfg.preroll_ms))
        self._cut_in = False  # the turn took the floor from the bot
        self._carried = None
        self._carried_pause = None
        self._speech_in_turn = 0
        self._next_cap_check = 0
        self._speech_end = None

    def _drop_utterance(self) -> None:
        self._evaluating = None
        self._result = None
        self._speech_end = None
        self._speech_in_turn = 0

    @property
    def pending_answer(self) -> str | None:
        """The words the caller's turn will be answered with if they stay quiet, while
        the engine waits out the pause (a statement's, a long turn's): what a reply can
        be drafted from. Words that stop where a sentence cannot only late in the wait."""
        result = self._result
        if result is None or self.state is not TurnState.CALLER or self.speaking:
            return None
        text = result.text.strip()
        if result.capped or result.hearing is not Hearing.HEARD or not text:
            return None
        if looks_unfinished(text):
            # Mostly the caller goes on, but a turn misheard as hanging is answered
            # when its long wait runs out: late in the wait, it is worth the draft.
            if _ms(self.position - result.end) < self.cfg.unfinished_draft_after_ms:
                return None
        return text

    @property
    def utterance_start(self) -> int:
        return self._utterance_start

    @property
    def holding(self) -> bool:
        return self.state is TurnState.HELD

    def _to(self, state: TurnState) -> None:
        if state not in _ALLOWED[self.state]:
            raise IllegalTransition(f"{self.state.value} -> {state.value}")
        self.state = state

    def _emit(self, event: CallEvent) -> None:
        if self._emit_to is not None:
            self._emit_to(event)


def _answerable(result: Evaluation, cfg: TurnTaking) -> bool:
    """Words that answer, should the bot have been ending: a backchannel's ("Yes.",
    "Okay.") or ones the end-of-turn model is sure of ("Six."), not a hum's words
    Whisper made ("And make him.") or a sentence's start."""
    text = result.text.strip()
    if result.hearing is not Hearing.HEARD or not text or looks_unfinished(text):
        return False
    return is_backchannel(text) or result.probability >= cfg.end_of_turn_threshold


def _ms(samples: int) -> int:
    return samples * 1000 // RATE


def _samples(ms: int | float) -> int:
    return int(ms * RATE / 1000)
