"""What the caller has actually heard of the bot: a playout schedule kept honest by marks.

The bot sends audio to Twilio faster than real time, each chunk followed by a
uniquely named mark. Twilio echoes a mark once everything before it has played,
and on `clear` discards unplayed audio and echoes every pending mark at once, so
an echo after a clear means "discarded", not "played". Between echoes the clock
estimates playback from the schedule: chunks play back to back, each starting at
max(sent time, end of the previous one); every echo re-anchors the schedule.

All times are samples on the 8 kHz call clock.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ChunkRecord", "Heard", "PlayoutClock", "Unplayed"]

_SILENCE_DB = -120.0
_FRAME = 160  # one 20 ms media frame at 8 kHz: slack for audible()


@dataclass
class ChunkRecord:
    """One sent chunk and where the schedule expects it to play."""

    name: str
    turn_id: int
    text: str
    samples: int
    sent_at: int
    expected_start: int
    expected_end: int
    pcm: np.ndarray | None = field(default=None, repr=False)  # float32, only while needed
    fresh: bool = False  # sent to an idle line: its echo tells how long playing takes


@dataclass(frozen=True)
class Unplayed:
    """The part of a chunk the caller had not heard yet (float32), with its words."""

    turn_id: int
    text: str
    pcm: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class Heard:
    """How much of a turn the caller heard before a barge-in cleared the rest."""

    turn_id: int
    text: str
    played_samples: int
    truncated: bool


def _join(left: str, right: str) -> str:
    """Concatenate text pieces, adding a space when neither side brings one."""
    if not left:
        return right
    if not right:
        return left
    if left[-1].isspace() or right[0].isspace():
        return left + right
    return f"{left} {right}"


def _place(out: np.ndarray, lo: int, start: int, end: int, pcm: np.ndarray) -> None:
    """Copy the part of pcm (covering [start, end)) that falls in out's [lo, lo + len)."""
    a, b = max(lo, start), min(lo + out.size, end)
    if a < b:
        out[a - lo : b - lo] = pcm[a - start : b - start]


def _cut_at_word(text: str, fraction: float) -> str:
    """The first `fraction` of `text`, cut back to the last whole word."""
    if fraction >= 1.0:
        return text
    cut = int(len(text) * max(0.0, fraction))
    if cut < len(text) and not text[cut].isspace():
        # Mid-word: the caller did not hear this word in full, so drop it.
        cut = text.rfind(" ", 0, cut + 1)
        if cut < 0:
            return ""
    return text[:cut].rstrip()


class PlayoutClock:
    """Mirrors Twilio's playback of the bot's audio for one call."""

    def __init__(
        self,
        sample_rate: int = 8000,
        history_samples: int | None = None,
        on_played: Callable[[int, np.ndarray], None] | None = None,
        min_latency: int = 0,
        learn_latency: bool = False,
        frame: int = 0,
    ) -> None:
        self.sample_rate = sample_rate
        # Audio sent now cannot play before it has crossed the network to Twilio: the
        # schedule starts it no earlier than this many samples after it was sent. The
        # echo canceller reads the schedule this far ahead, so it knows an utterance's
        # first samples before they can come back as echo. With `learn_latency`, the
        # mark echo of each utterance's first chunk corrects it, so the schedule does
        # not jump when the echo re-anchors it (a jump the echo canceller would have to
        # find again, leaking echo meanwhile).
        self.min_latency = min_latency
        self._learn_latency = learn_latency
        self._latency_bounds = (sample_rate // 50, sample_rate // 4)  # 20-250 ms
        self._echo_slack = sample_rate // 50  # a mark echoes up to one 20 ms frame late
        # Twilio plays in `frame`-sample frames on the stream's grid (0: the schedule is
        # continuous). Audio reaching it within a frame starts at the next boundary, so a
        # reply sent 0-20 ms after a caller frame arrived starts at the same sample: from
        # a continuous latency the schedule put it up to a frame late, and a reply whose
        # echo reference is 5-20 ms off at its first samples leaks ~300 ms of echo
        # (AEC3 re-adapts on the misplaced reference), enough to hold the bot.
        self._frame = frame
        self._starts_seen: deque[int] = deque(maxlen=16)  # recent fresh starts - sent
        # Told (start sample, float32 pcm) for every piece of audio the caller heard, in
        # order: the call's record of the bot's side.
        self._on_played = on_played
        self._history_samples = sample_rate if history_samples is None else history_samples
        self._pending: OrderedDict[str, ChunkRecord] = OrderedDict()
        self._cleared: set[str] = set()  # names whose (late) echoes mean "discarded"
        self._heard: dict[int, str] = {}  # turn_id -> text heard so far
        self._heard_samples: dict[int, int] = {}
        # Recently played audio for echo detection: (start, end, pcm) on the schedule.
        self._played: deque[tuple[int, int, np.ndarray]] = deque()
        self._tail = 0  # expected end of the last scheduled chunk
        self._marks_issued = 0
        # Times a mark echo moved the schedule: the echo reference already read for the
        # moved audio was in the wrong place, and the echo canceller re-adapts.
        self.moves = 0

    @property
    def reference_lead(self) -> int:
        """How far ahead of the caller's audio the echo reference is read, in samples.

        Constant all call: the echo canceller finds the echo path once, and a lead that
        moved with the learnt latency (140 ms at a call's start, 20 ms later) moved the
        path by as much between utterances, so each reply leaked echo while it searched
        again (the bot held itself, and answered its own "I'm sorry"). No further ahead
        than the schedule can start new audio, or an utterance's first samples would be
        read as silence before they were sent.
        """
        return self._latency_bounds[0] if self._learn_latency else self.min_latency

    @property
    def marks_pending(self) -> int:
        """Marks sent whose echo has not come back: audio Twilio has not played yet."""
        return len(self._pending)

    def new_mark_name(self) -> str:
        self._marks_issued += 1
        return f"m{self._marks_issued}"

    def sent(
        self,
        name: str,
        samples: int,
        text: str,
        turn_id: int,
        now: int,
        pcm: np.ndarray | None = None,
    ) -> None:
        """Record a chunk of `samples` audio sent at `now`, followed by mark `name`."""
        if name in self._pending or name in self._cleared:
            raise ValueError(f"mark name {name!r} already in use")
        if samples < 0:
            raise ValueError(f"samples must be >= 0, got {samples}")
        audio: np.ndarray | None = None
        if pcm is not None:
            arr = np.asarray(pcm)
            if arr.size != samples:
                raise ValueError(f"pcm has {arr.size} samples, chunk says {samples}")
            audio = (
                arr.astype(np.float32) / np.float32(32768.0)
                if arr.dtype == np.int16
                else arr.astype(np.float32)
            )
        first = self._first_sample(now)
        start = max(first, self._tail)
        fresh = start == first and not self._pending
        self._pending[name] = ChunkRecord(
            name=name,
            turn_id=turn_id,
            text=text,
            samples=samples,
            sent_at=now,
            expected_start=start,
            expected_end=start + samples,
            pcm=audio,
            fresh=fresh,
        )
        self._tail = start + samples
        self._heard.setdefault(turn_id, "")
        self._heard_samples.setdefault(turn_id, 0)

    def awaits_echo(self, name: str) -> bool:
        """A mark of ours whose echo is still due (played or cleared)."""
        return name in self._pending or name in self._cleared

    def echoed(self, name: str, now: int) -> ChunkRecord | None:
        """A mark came back. Returns the chunk if it was played, None if cleared or unknown."""
        if name in self._cleared:
            self._cleared.discard(name)
            return None
        if name not in self._pending:
            return None
        # Marks echo in order, so anything queued before this chunk has played too.
        done: list[ChunkRecord] = []
        while not done or done[-1].name != name:
            done.append(self._pending.popitem(last=False)[1])
        # An echo says the chunk ended at most a frame before `now`: a mark is echoed at
        # the first 20 ms frame boundary after its audio, with the caller's frames.
        # Within that, the schedule stands. Re-anchored on every echo, it moved 6-16 ms
        # back and forth between chunks, and the echo canceller, whose reference it is,
        # lost the echo path at each move and let the bot's echo through.
        end = done[-1].expected_end
        if not now - self._echo_slack <= end <= now:
            # Re-anchor: this chunk just finished, so it and its predecessors ended
            # back to back at now.
            end = now
            self.moves += 1
        for chunk in reversed(done):
            chunk.expected_end = end
            chunk.expected_start = end - chunk.samples
            end = chunk.expected_start
        # What the line showed, for learning: on the frame grid, an echo within the
        # slack still tells the start (the schedule, kept, may be a frame early).
        shown = now - done[-1].expected_end if self._frame else 0
        for chunk in done:
            self._record_played(chunk, chunk.samples)
            self._remember_audio(chunk, chunk.samples)
            # (On the grid, only a chunk of whole frames that carried this mark: the
            # echo comes at the first frame boundary after its end.)
            whole = not self._frame or (chunk is done[-1] and chunk.samples % self._frame == 0)
            if chunk.fresh and self._learn_latency and whole:
                self._learn(chunk.expected_start + shown - chunk.sent_at)
        cursor = done[-1].expected_end
        for chunk in self._pending.values():
            chunk.expected_start = cursor
            chunk.expected_end = cursor + chunk.samples
            cursor = chunk.expected_end
        self._tail = cursor
        return done[-1]

    def _first_sample(self, now: int) -> int:
        """Where audio sent to an idle line at `now` starts, by the schedule."""
        if not self._frame:
            return now + self.min_latency
        return (now + self.min_latency) // self._frame * self._frame + self._frame

    def _learn(self, observed: int) -> None:
        """Move the start-up latency towards what the line just showed."""
        lo, hi = self._latency_bounds
        if not self._frame:
            self.min_latency = min(hi, max(lo, (self.min_latency + observed) // 2))
            return
        # On the frame grid each start says the latency lies in [observed - frame,
        # observed): take the middle of what the recent starts agree on, forgetting the
        # oldest until they do (the line's latency changed). No floor but zero: the grid
        # already starts audio no earlier than the next frame, past the reference's lead.
        seen = self._starts_seen
        seen.append(observed)
        while max(seen) - self._frame >= min(seen):
            seen.popleft()
        middle = (max(seen) - self._frame + min(seen)) // 2
        self.min_latency = min(hi, max(0, middle))

    def cleared(self, now: int) -> list[Heard]:
        """The server sent `clear` at `now`: drop pending audio, estimate what was heard."""
        touched: dict[int, bool] = {}  # turn_id -> truncated
        for chunk in self._pending.values():
            played = min(chunk.samples, max(0, now - chunk.expected_start))
            fraction = played / chunk.samples if chunk.samples else 1.0
            truncated = played < chunk.samples
            text = _cut_at_word(chunk.text, fraction) if truncated else chunk.text
            self._heard[chunk.turn_id] = _join(self._heard[chunk.turn_id], text)
            self._heard_samples[chunk.turn_id] += played
            if played:
                self._remember_audio(chunk, played)
            touched[chunk.turn_id] = touched.get(chunk.turn_id, False) or truncated
            self._cleared.add(chunk.name)
        self._pending.clear()
        self._tail = now
        return [
            Heard(
                turn_id=turn_id,
                text=self._heard[turn_id],
                played_samples=self._heard_samples[turn_id],
                truncated=truncated,
            )
            for turn_id, truncated in touched.items()
        ]

    def unplayed(self, now: int) -> list[Unplayed]:
        """What of the pending audio has not played by `now`: asked just before a clear
        that may be undone (a hold), so the rest can be sent again."""
        rest = []
        for chunk in self._pending.values():
            played = min(chunk.samples, max(0, now - chunk.expected_start))
            if played >= chunk.samples or chunk.pcm is None:
                continue
            fraction = played / chunk.samples if chunk.samples else 1.0
            heard = _cut_at_word(chunk.text, fraction) if played else ""
            rest.append(
                Unplayed(
                    turn_id=chunk.turn_id,
                    text=chunk.text[len(heard) :].strip(),
                    pcm=chunk.pcm[played:].copy(),
                )
            )
        return rest

    @property
    def sent_until(self) -> int:
        """Where the audio sent so far ends by the schedule (after a clear: the clear)."""
        return self._tail

    def audible(self, now: int) -> bool:
        """Bot audio is (expected to be) playing: unechoed chunks scheduled past now."""
        return bool(self._pending) and self._tail > now - _FRAME

    def pending_samples(self, now: int) -> int:
        """Sent audio the schedule says has not played yet at `now`."""
        return sum(
            min(chunk.samples, max(0, chunk.expected_end - now)) for chunk in self._pending.values()
        )

    def turn_heard(self, turn_id: int) -> str:
        """Text of `turn_id` played so far (after a clear: the estimate it returned)."""
        return self._heard.get(turn_id, "")

    def reference_level_db(self, now: int, window: int = 1600) -> float:
        """RMS dBFS of bot audio expected to play in [now - window, now); -120 if none.

        Chunks sent without PCM count as silence.
        """
        if window <= 0:
            return _SILENCE_DB
        audio = self.render(now - window, now)
        energy = float(np.dot(audio, audio))
        if energy <= 0.0:
            return _SILENCE_DB
        return max(_SILENCE_DB, 10.0 * float(np.log10(energy / window)))

    def render(self, lo: int, hi: int) -> np.ndarray:
        """The bot audio the schedule puts in [lo, hi), float32, silence where none.

        This is what the caller's room heard at those call-clock samples: the far-end
        reference for echo cancellation. Played audio is kept for about a second
        (`history_samples`); pending audio is known until it is cleared.
        """
        out = np.zeros(max(0, hi - lo), dtype=np.float32)
        for start, end, pcm in self._played:
            _place(out, lo, start, end, pcm)
        for chunk in self._pending.values():
            if chunk.expected_start >= hi:
                break  # the schedule is in order: nothing later has started
            if chunk.pcm is not None:
                _place(out, lo, chunk.expected_start, chunk.expected_end, chunk.pcm)
        return out

    def _record_played(self, chunk: ChunkRecord, samples: int) -> None:
        self._heard[chunk.turn_id] = _join(self._heard[chunk.turn_id], chunk.text)
        self._heard_samples[chunk.turn_id] += samples

    def _remember_audio(self, chunk: ChunkRecord, samples: int) -> None:
        """Keep the played part of a chunk's PCM for a bounded ~1 s, then let it go."""
        if chunk.pcm is not None and samples:
            start = chunk.expected_start
            self._played.append((start, start + samples, chunk.pcm[:samples]))
            if self._on_played is not None:
                self._on_played(start, chunk.pcm[:samples])
        chunk.pcm = None
        newest_end = max(end for _, end, _ in self._played) if self._played else 0
        while self._played and self._played[0][1] <= newest_end - self._history_samples:
            self._played.popleft()
