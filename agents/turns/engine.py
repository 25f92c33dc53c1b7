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

from dataclasses import dataclass

from agents.turns.config import TurnTaking
from agents.turns.continuation import Continuation
from agents.turns.judge import FusedJudge, Said, TurnJudge, TurnSoFar
from agents.turns.overlap import Overlap, RecentFrames, lets_the_bot_go_on
from agents.turns.protocol import (
    Answer,
    Clear,
    Decision,
    DropEvaluation,
    Evaluate,
    Evaluation,
    Frame,
    Hearing,
    Hold,
    IllegalTransition,
    Lower,
    Reopen,
    Reprompt,
    Resume,
    Silence,
    TurnState,
)
from agents.turns.text import (
    is_backchannel,
    is_farewell,
    looks_unfinished,
)
from callevents import (
    Backchannel,
    CallEvent,
    EchoIgnored,
    EndOfTurn,
    EventSink,
    NotHeld,
    NotSpeech,
    SpeechStart,
    SpeechStop,
    TurnCapped,
)
from media.vad import SpeechStarted, SpeechStopped

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
    "Lower",
    "Overlap",
    "Reopen",
    "Reprompt",
    "Resume",
    "Silence",
    "TurnEngine",
    "TurnState",
    "TurnTaking",
]

RATE = 16000

# Exactly the moves calls make (each is taken in tests/agents/test_turn_transitions.py).
_ALLOWED: dict[TurnState, frozenset[TurnState]] = {
    TurnState.LISTENING: frozenset({TurnState.CALLER, TurnState.REPLYING}),
    TurnState.CALLER: frozenset({TurnState.LISTENING, TurnState.ANSWERING, TurnState.REPLYING}),
    TurnState.ANSWERING: frozenset({TurnState.CALLER, TurnState.BOT, TurnState.LISTENING}),
    TurnState.REPLYING: frozenset({TurnState.CALLER, TurnState.BOT, TurnState.LISTENING}),
    TurnState.BOT: frozenset({TurnState.LISTENING, TurnState.OVERLAP}),
    TurnState.OVERLAP: frozenset(
        {TurnState.BOT, TurnState.HELD, TurnState.CALLER, TurnState.LISTENING}
    ),
    TurnState.HELD: frozenset({TurnState.RESUMING, TurnState.BOT, TurnState.CALLER}),
    TurnState.RESUMING: frozenset({TurnState.HELD, TurnState.BOT, TurnState.CALLER}),
}
# The bot's audio is stopped while the caller's words over it are judged.
_HELD = (TurnState.HELD, TurnState.RESUMING)
# A reply is made and not heard yet.
_UNHEARD_REPLY = (TurnState.ANSWERING, TurnState.REPLYING)


@dataclass(slots=True)
class _EndWords:
    """Words over a held reply that let it go on: the caller's turn if it ends soon."""

    result: Evaluation
    start: int
    heard: int = 0  # samples of the reply audible since it resumed


class TurnEngine:
    """One call's turn taking. Feed it; do what it returns."""

    def __init__(
        self, config: TurnTaking, *, emit: EventSink | None = None, judge: TurnJudge | None = None
    ) -> None:
        self.cfg = config
        self.judge: TurnJudge = judge or FusedJudge(config)
        self._emit_to = emit
        self.state = TurnState.LISTENING
        self.position = 0
        self.speaking = False  # the caller's speech run is on
        self._echo_settled = True  # the front end's canceller, at the latest frame
        self._speech_start = 0
        self._utterance_start = 0  # first sample of the caller's turn (with preroll)
        self._speech_in_turn = 0  # samples of speech in the turn, pauses excluded
        self._speech_end: int | None = None
        self._evaluating: Evaluate | None = None
        self._result: Evaluation | None = None
        self._next_cap_check = 0
        self._overlap: Overlap | None = None
        self._recent = RecentFrames()
        self._bot_busy = False  # a reply is being made or played (driver's fact)
        # RESUMING: the stop of the words judged, and the quiet after it that resumes.
        self._resume_after = 0
        self._resume_wait_ms = config.resume_min_silence_ms
        self._answered = Continuation(config, self._emit)
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
        if self.state in _UNHEARD_REPLY:
            self._to(TurnState.BOT)

    def reply_done(self) -> None:
        """Nothing more will be sent for this reply (finished, failed or cancelled)."""
        self._bot_busy = False

    def caller_reset(self) -> None:
        """The caller's input was answered some other way (keypad): forget the utterance."""
        self._drop_utterance()
        self._answered.forget()
        self._end_words = None
        if self.state in (TurnState.CALLER, TurnState.OVERLAP):
            self._to(TurnState.LISTENING)

    # --- caller audio --------------------------------------------------------------------

    def frame(self, frame: Frame) -> list[Decision]:
        out: list[Decision] = []
        self.position = frame.end
        self._echo_settled = frame.echo_settled
        # `frame.bot_audible` was measured before this frame's decisions: a bot resumed
        # in this frame is not audible in it yet, and is not played out by that.
        state_before = self.state
        if frame.bot_audible:
            self._answered.bot_heard(frame.samples)
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
        if self.state is TurnState.RESUMING:
            self._resume_after_pause(self._resume_after, out)
        if self.state is TurnState.OVERLAP or self.state in _HELD:
            self._overlap_frame(frame, out)
        elif (
            (self.state is TurnState.BOT or self.state in _UNHEARD_REPLY)
            and self.state is state_before
            and not frame.bot_audible
            and not self._bot_busy
        ):
            # The reply played out, or failed with nothing said.
            self._answered.forget()
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
            case TurnState.ANSWERING | TurnState.REPLYING:
                # They went on before the reply was heard: the reply is void and their
                # answered turn reopens with all its audio (any other reply is simply
                # dropped, and this is a new turn).
                reopens = self.state is TurnState.ANSWERING
                if reopens:
                    self._answered.reopened(sample)
                else:
                    self._begin_utterance(sample)
                    self._answered.forget()
                out.append(Reopen(start=self._utterance_start, restore=reopens))
                self._to(TurnState.CALLER)
            case TurnState.BOT:
                self._overlap = Overlap(start=sample)
                self._overlap.count_from_onset(self._recent, self.cfg)
                self._answered.speech_over_bot(sample, (*self._recent, frame))
                self._begin_utterance(sample)
                self._to(TurnState.OVERLAP)
            case TurnState.OVERLAP | TurnState.HELD | TurnState.RESUMING:
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
                # Never loud enough to hold the bot: the bot's echo, or the room (or a
                # caller the echo canceller held down: the record says how loud).
                speech_ms = _ms(sample - self._overlap.start)
                if self._overlap.loud:
                    loud_ms = _ms(self._overlap.loud)
                    settled = self._echo_settled
                    self._emit(NotHeld(speech_ms=speech_ms, loud_ms=loud_ms, echo_settled=settled))
                else:
                    self._emit(EchoIgnored(speech_ms=speech_ms))
                self._end_overlap(TurnState.BOT)
            case TurnState.HELD | TurnState.RESUMING:
                assert self._overlap is not None
                self._overlap.stopped = sample
                # Not when the speech may be the rest of the answered turn (it came right
                # after the pause the bot answered into): a caller finishing a sentence
                # pauses again, and the bot would come back into that pause.
                if not self._answered.may_go_on and self._overlap.lowers_again():
                    out.append(Lower())
                # Short: a backchannel, or a short interruption (a word or two). Its
                # words decide; the bot stays held (or lowered) meanwhile.
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
                    self._answered.took_floor(overlap.start)
                    self._to(TurnState.CALLER)
                return
            overlap.count(frame, self.speaking, self.cfg)
            if overlap.holds(self.position, frame.echo_settled, self.cfg):
                overlap.held_at = self.position
                self._to(TurnState.HELD)
                out.append(Hold())
                return
        if self.state in _HELD:
            overlap.count(frame, self.speaking, self.cfg)  # when they were last loud
        if self.state in _HELD and self.speaking:
            factor = 1 if frame.echo_settled else 2
            if speech >= _samples(self.cfg.barge_in_min_speech_ms) * factor:
                self._interrupt("barge_in", out)
            elif overlap.silences(self.position, self.cfg):
                overlap.silenced = True
                out.append(Silence())
            elif overlap.fell_quiet(self.position, self.cfg):
                # As at the stop speech detection calls later (`_on_stop`).
                if not self._answered.may_go_on and overlap.lowers_again():
                    out.append(Lower())

    def _interrupt(self, reason: str, out: list[Decision]) -> None:
        """A real interruption: the bot's turn ends; the caller's goes on."""
        out.append(Clear(reason=reason))
        onset = None if self._overlap is None else self._overlap.start
        self._overlap = None
        self._bot_busy = False
        if onset is not None:
            self._answered.took_floor(onset)
        self._to(TurnState.CALLER)
        idle = self._evaluating is None and self._result is None
        if not self.speaking and self._speech_end is not None and idle:
            self._evaluate(self._speech_end, out)

    def _end_overlap(self, state: TurnState) -> None:
        self._overlap = None
        self._answered.overlap_ended()
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
        if self.state in _HELD:
            self._judge_held(result, out)
        if self.state is TurnState.CALLER:
            self._answered.judged(result)
        self._maybe_end_turn(out)
        return out

    def failed(self, end: int) -> list[Decision]:
        """The evaluation for `end` failed: the turn is over, unheard (the driver
        apologises)."""
        if self._evaluating is None or self._evaluating.end != end:
            return []
        self._evaluating = None
        self._drop_utterance()
        if self.state in _HELD:
            return self._resume("evaluation_failed")
        if self.state is TurnState.CALLER:
            self._to(TurnState.LISTENING)
        return []

    def _judge_held(self, result: Evaluation, out: list[Decision]) -> None:
        overlap = self._overlap
        assert overlap is not None
        speech_ms = _ms((overlap.stopped or self.position) - overlap.start)
        if lets_the_bot_go_on(result, speech_ms, self.cfg):
            self._result = None
            self._emit(Backchannel(speech_ms=speech_ms, text=result.text))
            words = result.hearing is Hearing.HEARD and not is_backchannel(result.text)
            cfg = self.cfg
            if self.judge.answerable(result) and not self._last_reply:
                self._end_words = _EndWords(result, start=self._utterance_start)
            self._resume_wait_ms = cfg.resume_after_words_ms if words else cfg.resume_min_silence_ms
            self._resume_after = overlap.stopped or self.position
            if self.state is TurnState.HELD:
                self._to(TurnState.RESUMING)
            self._resume_after_pause(self._resume_after, out)
            return
        # Words that are not a backchannel: the caller is taking the turn.
        self._interrupt("short_interruption", out)

    def _resume_after_pause(self, stopped: int, out: list[Decision]) -> None:
        """Resume a backchannel's held bot once the caller has been quiet long enough
        after the `stopped` that was judged.

        Quiet is no frame as loud as a caller's: babble that speech detection calls speech
        does not keep the bot held. The caller speaking up again does: then the overlap
        goes on, and is judged again when it stops (or interrupts by its length).
        """
        overlap = self._overlap
        assert overlap is not None
        last_loud = overlap.last_loud or stopped
        if overlap.restarted is not None and overlap.restarted > stopped:
            if last_loud > overlap.restarted:
                self._to(TurnState.HELD)  # they went on after the pause
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
        self._drop_utterance()
        heard = result.hearing is Hearing.HEARD
        if heard and result.text.strip():
            self._commit(result.text.strip(), start, end, silence_ms, out)
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
        out: list[Decision],
        *,
        reopens: bool = True,
    ) -> None:
        """Answer the caller's turn. `reopens`: a caller going on before the reply is
        heard continues this turn from `start` (its audio is still kept)."""
        self._answered.answer(Said(end=end), at=self.position)
        out.append(
            Answer(
                text=text, start=start, end=end, silence_ms=silence_ms, farewell=is_farewell(text)
            )
        )
        self._to(TurnState.ANSWERING if reopens else TurnState.REPLYING)

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
        # Said over the bot, whose audio the driver keeps less of: a caller going on before
        # the reply is heard starts a turn of their own, and these words stay answered.
        self._commit(text, words.start, result.end, silence_ms, out, reopens=False)

    def _emit_end_of_turn(self, result: Evaluation, silence_ms: int) -> None:
        self._emit(
            EndOfTurn(
                probability=None if result.probability is None else round(result.probability, 3),
                words=None if result.words is None else round(result.words, 3),
                silence_ms=silence_ms,
                text=result.text,
                hearing=result.hearing.value,
                no_speech_prob=round(result.no_speech_prob, 3),
                avg_logprob=round(result.avg_logprob, 3),
            )
        )

    def _complete(self, result: Evaluation, silence_ms: int) -> bool:
        turn = TurnSoFar(
            result=result,
            run_s=(result.end - self._speech_start) / RATE,
            patience_ms=self._answered.patience_ms,
        )
        return self.judge.ends_turn(turn, silence_ms)

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
        self._answered.new_turn()
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
        return self.state in _HELD

    @property
    def over_bot(self) -> bool:
        """The bot has the floor: talking, or held under the caller's words."""
        return self.state in (TurnState.BOT, TurnState.OVERLAP, *_HELD)

    def _to(self, state: TurnState) -> None:
        if state not in _ALLOWED[self.state]:
            raise IllegalTransition(f"{self.state.value} -> {state.value}")
        self.state = state

    def _emit(self, event: CallEvent) -> None:
        if self._emit_to is not None:
            self._emit_to(event)


def _ms(samples: int) -> int:
    return samples * 1000 // RATE


def _samples(ms: int | float) -> int:
    return int(ms * RATE / 1000)
