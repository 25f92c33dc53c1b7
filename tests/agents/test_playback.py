"""Playback: the bot's clauses out as mu-law chunks and marks, and what was heard of them."""

import asyncio
import math
from collections.abc import Awaitable

import numpy as np
import pytest

from agents.playback import PHONE_RATE, Playback
from media.codec import mulaw_decode
from media.resample import resample
from tests.agents.fakes import Clear, Clock, Mark, Media, RecordingSink, tone

TTS_RATE = 16000
CHUNK = PHONE_RATE // 10  # 100 ms chunks, the default
FOUR_WORDS = "one two three four"


def _playback(chunk_ms: int = 100) -> tuple[Playback, RecordingSink, Clock]:
    sink, clock = RecordingSink(), Clock()
    return Playback(sink, clock, chunk_ms=chunk_ms), sink, clock


async def test_play_sends_media_then_a_mark_for_each_chunk() -> None:
    playback, sink, _ = _playback()
    await playback.play(tone(0.35, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    kinds = [type(message) for message in sink.sent]
    assert kinds == [Media, Mark] * 4


async def test_play_names_every_mark_differently() -> None:
    playback, sink, _ = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    assert len(set(sink.marks())) == 8


async def test_play_cuts_audio_into_chunks_of_chunk_ms() -> None:
    playback, sink, _ = _playback(chunk_ms=20)
    await playback.play(tone(0.1, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    assert [len(payload) for payload in sink.media()] == [PHONE_RATE // 50] * 5


async def test_mulaw_payloads_add_up_to_the_audio_resampled_to_8_khz() -> None:
    playback, sink, _ = _playback()
    pcm = tone(0.537, 22050)
    await playback.play(pcm, 22050, FOUR_WORDS, turn_id=1)
    sizes = [len(payload) for payload in sink.media()]
    assert sum(sizes) == len(resample(pcm, 22050, PHONE_RATE))
    assert all(size == CHUNK for size in sizes[:-1])
    assert 0 < sizes[-1] <= CHUNK


async def test_words_are_shared_over_the_chunks_in_proportion_to_time() -> None:
    playback, sink, clock = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    texts = []
    for name in sink.marks():
        record = playback.clock.echoed(name, clock())
        assert record is not None
        texts.append(record.text)
    assert texts == ["one", "two", "three", "four"]


async def test_the_chunks_of_a_clause_hold_all_its_words_in_order() -> None:
    playback, sink, clock = _playback()
    text = "the quick brown fox jumps over the lazy dog"
    await playback.play(tone(0.35, TTS_RATE), TTS_RATE, text, turn_id=1)
    texts = [playback.clock.echoed(name, clock()) for name in sink.marks()]
    assert " ".join(r.text for r in texts if r is not None and r.text) == text


async def test_play_returns_where_the_clause_will_start_on_the_call_clock() -> None:
    playback, _, clock = _playback()
    clock.samples = 1000
    first = await playback.play(tone(0.5, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    second = await playback.play(tone(0.5, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    assert first == 1000
    assert second == 1000 + PHONE_RATE // 2


async def test_an_echoed_mark_of_a_pending_chunk_counts() -> None:
    playback, sink, clock = _playback()
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    clock.samples = CHUNK
    assert playback.echoed(sink.marks()[0])


async def test_an_unknown_mark_does_not_count() -> None:
    playback, _, _ = _playback()
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    assert not playback.echoed("not-ours")


async def test_a_mark_echoed_twice_counts_once() -> None:
    playback, sink, _ = _playback()
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    first = sink.marks()[0]
    assert playback.echoed(first)
    assert not playback.echoed(first)


async def test_clear_sends_a_clear() -> None:
    playback, sink, _ = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    await playback.clear()
    assert sink.sent[-1] == Clear()
    assert sink.clears() == 1


async def test_clear_reports_the_words_played_so_far() -> None:
    playback, _, clock = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=7)
    clock.samples = 2 * CHUNK + CHUNK // 2  # halfway through "three"
    [heard] = await playback.clear()
    assert heard.turn_id == 7
    assert heard.text == "one two"
    assert heard.truncated
    assert heard.played_samples == 2 * CHUNK + CHUNK // 2


async def test_clear_after_everything_played_is_not_a_truncation() -> None:
    playback, sink, clock = _playback()
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "general kenobi", turn_id=2)
    clock.samples = 2 * CHUNK
    for name in sink.marks()[:2]:
        playback.echoed(name)
    clock.samples = 4 * CHUNK
    [heard] = await playback.clear()
    assert heard.turn_id == 2
    assert heard.text == "general kenobi"
    assert not heard.truncated


async def test_nothing_is_audible_before_anything_is_played() -> None:
    playback, _, _ = _playback()
    assert not playback.audible()


async def test_a_clause_is_audible_while_it_plays() -> None:
    playback, _, clock = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    assert playback.audible()
    clock.samples = 4 * CHUNK - 1
    assert playback.audible()


async def test_a_clause_is_no_longer_audible_once_its_schedule_has_run_out() -> None:
    playback, _, clock = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    clock.samples = 5 * CHUNK
    assert not playback.audible()


async def test_a_clause_is_no_longer_audible_once_its_last_mark_is_echoed() -> None:
    playback, sink, clock = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    clock.samples = 2 * CHUNK  # played faster than the schedule said
    playback.echoed(sink.marks()[-1])
    assert not playback.audible()


async def test_nothing_is_audible_after_a_clear() -> None:
    playback, _, clock = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    clock.samples = CHUNK
    await playback.clear()
    assert not playback.audible()


async def test_the_reference_level_is_the_level_of_the_bot_audio_playing() -> None:
    playback, _, clock = _playback()
    amplitude = 0.3
    await playback.play(tone(1.0, TTS_RATE, amplitude=amplitude), TTS_RATE, "la", turn_id=1)
    silent = playback.reference_level_db()
    clock.samples = PHONE_RATE // 2
    playing = playback.reference_level_db()
    rms_db = 20 * math.log10(amplitude / math.sqrt(2))
    assert silent == -120.0
    assert np.isclose(playing, rms_db, atol=0.5)


async def test_a_clause_with_no_audio_sends_nothing() -> None:
    # A TTS given only punctuation ("—") makes no sound: an empty media payload is a
    # protocol error at Twilio's end, and a mark for it would name nothing.
    playback, sink, _ = _playback()
    await playback.play(np.zeros(0, dtype=np.float32), TTS_RATE, "—", turn_id=1)
    assert sink.sent == []


async def _returns_within(awaitable: Awaitable[None], seconds: float) -> bool:
    try:
        await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        return False
    return True


async def test_waiting_for_the_bot_to_be_unheld_returns_at_once_when_it_is_not_held() -> None:
    playback, _, _ = _playback()
    assert await _returns_within(playback.until_unheld(), 0.1)


async def test_waiting_for_the_bot_to_be_unheld_lasts_until_it_resumes() -> None:
    playback, _, _ = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    await playback.hold()
    assert not await _returns_within(playback.until_unheld(), 0.05)
    await playback.resume()
    assert await _returns_within(playback.until_unheld(), 0.1)


async def test_waiting_for_the_bot_to_be_unheld_ends_when_the_held_bot_is_cleared() -> None:
    playback, _, _ = _playback()
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    await playback.hold()
    await playback.clear()
    assert await _returns_within(playback.until_unheld(), 0.1)


# --- a hold that lowers the bot (HOLD_DUCK_DB) -----------------------------------------


def _ducking(db: float = 20.0) -> tuple[Playback, RecordingSink, Clock]:
    sink, clock = RecordingSink(), Clock()
    return Playback(sink, clock, hold_duck_db=db), sink, clock


def _level_db(payloads: list[bytes], *, after_ms: int = 0) -> float:
    """The level of mu-law audio, from `after_ms` in (past a change of level's ramp)."""
    pcm = mulaw_decode(b"".join(payloads)).astype(np.float64)[PHONE_RATE * after_ms // 1000 :]
    return 20 * math.log10(float(np.sqrt(np.mean(pcm**2))) / 32768.0)


def _after_last_clear(sink: RecordingSink) -> list[bytes]:
    last = max(i for i, sent in enumerate(sink.sent) if isinstance(sent, Clear))
    return [sent.payload for sent in sink.sent[last + 1 :] if isinstance(sent, Media)]


async def test_a_hold_with_a_duck_goes_on_with_what_was_left_lowered_by_it() -> None:
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(1.0, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    full = _level_db(sink.media())
    clock.samples = 3 * CHUNK  # 300 ms heard
    await playback.hold()
    lowered = _after_last_clear(sink)
    assert sum(len(p) for p in lowered) == PHONE_RATE - 3 * CHUNK  # nothing lost
    assert _level_db(lowered, after_ms=10) == pytest.approx(full - 20.0, abs=1.0)
    assert playback.holding
    assert playback.audible()  # the caller still hears it, quietly


async def test_a_lowered_bot_comes_back_to_full_level_from_where_it_was() -> None:
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(1.0, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    full = _level_db(sink.media())
    clock.samples = 3 * CHUNK
    await playback.hold()
    clock.samples = 5 * CHUNK  # 200 ms of it heard lowered
    held = await playback.resume()
    assert held == 2 * CHUNK
    back = _after_last_clear(sink)
    assert sum(len(p) for p in back) == PHONE_RATE - 5 * CHUNK
    assert _level_db(back, after_ms=10) == pytest.approx(full, abs=1.0)
    assert not playback.holding


async def test_clauses_made_while_the_bot_is_lowered_play_lowered() -> None:
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    full = _level_db(sink.media())
    clock.samples = CHUNK
    await playback.hold()
    before = len(sink.media())
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "general kenobi", turn_id=1)
    assert _level_db(sink.media()[before:]) == pytest.approx(full - 20.0, abs=1.0)


async def test_an_interruption_of_a_lowered_bot_counts_its_lowered_words_as_heard() -> None:
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=7)
    clock.samples = CHUNK + CHUNK // 2  # into "two"
    await playback.hold()
    clock.samples = 3 * CHUNK + CHUNK // 2  # into "four", lowered
    [heard] = await playback.clear()
    assert sink.sent[-1] == Clear()
    assert heard.text == "one two three"
    assert heard.truncated
    assert not playback.holding
    assert not playback.audible()
    assert await _returns_within(playback.until_unheld(), 0.1)


async def test_a_lowered_bot_that_played_out_comes_back_without_a_clear() -> None:
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    clock.samples = CHUNK
    await playback.hold()
    clears = sink.clears()
    clock.samples = 10 * CHUNK
    await playback.resume()
    assert sink.clears() == clears
    assert not playback.holding


async def test_a_lowered_bot_that_played_out_was_last_heard_where_its_audio_ended() -> None:
    playback, _, clock = _ducking(20.0)
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    clock.samples = CHUNK
    await playback.hold()
    assert playback.stopped_at() == CHUNK  # still playing, lowered: heard until now
    clock.samples = 10 * CHUNK  # its last 100 ms played out long ago
    assert playback.stopped_at() == 2 * CHUNK


async def _silenced() -> tuple[Playback, RecordingSink, Clock, float]:
    """A second of reply, lowered 200 ms in and silenced 200 ms later; and its level."""
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(1.0, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    full = _level_db(sink.media())
    clock.samples = 2 * CHUNK
    await playback.hold()
    clock.samples = 4 * CHUNK  # 200 ms of it heard lowered
    await playback.silence()
    return playback, sink, clock, full


async def test_a_lowered_bot_silenced_stops_at_the_ear_and_keeps_the_rest() -> None:
    playback, sink, _, _ = await _silenced()
    assert sink.clears() == 2  # the hold's and the silence's
    assert not playback.audible()
    assert playback.holding
    assert playback.stopped_at() == 4 * CHUNK


async def test_a_silenced_bot_lowered_again_goes_on_lowered_from_just_before_the_cut() -> None:
    playback, sink, clock, full = await _silenced()
    clock.samples = 6 * CHUNK  # the caller stopped; nothing played meanwhile
    await playback.lower()
    again = _after_last_clear(sink)
    # Nothing lost, and what played lowered before the cut comes again (at most 250 ms;
    # its lead starts at its first sound: a zero sample or so less).
    lead = 2 * CHUNK
    assert sum(len(p) for p in again) == pytest.approx(PHONE_RATE - 4 * CHUNK + lead, abs=2)
    assert _level_db(again, after_ms=10) == pytest.approx(full - 20.0, abs=1.0)
    assert playback.holding
    assert playback.audible()


async def test_a_silenced_bot_resumed_plays_the_rest_at_full_level() -> None:
    playback, sink, _, full = await _silenced()
    await playback.resume()
    back = _after_last_clear(sink)
    assert _level_db(back, after_ms=10) == pytest.approx(full, abs=1.0)
    assert not playback.holding
    assert await _returns_within(playback.until_unheld(), 0.1)


async def test_clauses_made_while_the_bot_is_silenced_wait_and_go_on_lowered() -> None:
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "hello there", turn_id=1)
    full = _level_db(sink.media())
    clock.samples = CHUNK
    await playback.hold()
    await playback.silence()
    sent = len(sink.media())
    await playback.play(tone(0.2, TTS_RATE), TTS_RATE, "general kenobi", turn_id=1)
    assert len(sink.media()) == sent  # waits with the rest
    await playback.lower()
    last_clause = sink.media()[-2:]
    assert _level_db(last_clause) == pytest.approx(full - 20.0, abs=1.0)


async def test_an_interruption_of_a_silenced_bot_counts_its_lowered_words_as_heard() -> None:
    playback, sink, clock = _ducking(20.0)
    await playback.play(tone(0.4, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=7)
    clock.samples = CHUNK + CHUNK // 2  # into "two"
    await playback.hold()
    clock.samples = 2 * CHUNK + CHUNK // 2  # into "three", lowered
    await playback.silence()
    clears = sink.clears()
    clock.samples = 4 * CHUNK
    [heard] = await playback.clear()
    assert sink.clears() == clears  # cleared at the silence already
    assert heard.text == "one two"
    assert heard.truncated
    assert not playback.holding


async def test_a_stopping_hold_is_not_silenced_or_lowered() -> None:
    playback, sink, clock = _playback()
    await playback.play(tone(1.0, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    clock.samples = 2 * CHUNK
    await playback.hold()
    sent = list(sink.sent)
    await playback.silence()
    await playback.lower()
    assert sink.sent == sent
    assert playback.holding


async def test_a_bot_not_held_is_not_silenced() -> None:
    playback, sink, _ = _ducking(20.0)
    await playback.play(tone(1.0, TTS_RATE), TTS_RATE, FOUR_WORDS, turn_id=1)
    sent = list(sink.sent)
    await playback.silence()
    await playback.lower()
    assert sink.sent == sent
    assert not playback.holding


def test_a_duck_is_an_attenuation() -> None:
    for db in (-6.0, 31.0):
        with pytest.raises(ValueError, match="attenuation"):
            Playback(RecordingSink(), Clock(), hold_duck_db=db)
