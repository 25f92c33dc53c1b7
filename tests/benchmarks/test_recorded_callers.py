"""People nobody here recorded, as `bench turns` callers: moonshine-voice's recordings,
cut into the readers' own utterances, paused where the reader went on."""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from benchmarks.turns.corpus import TURNS_PER_CALL, corpus_scripts, halves
from benchmarks.turns.recordings import (
    FAINT_TAIL_MS,
    LOUD_SHARE,
    RECORDINGS,
    UTTERANCE_PAUSE_MS,
    Clip,
    Heard,
    Recordings,
    Utterance,
    assets_dir,
    by_sentence,
    find_utterances,
    frame_levels_db,
)
from benchmarks.turns.script import RECORDED, Kind, Voices, prepare
from ops.simulate import After


@pytest.fixture(scope="module")
def recordings() -> Recordings:
    return Recordings()


def test_every_pinned_recording_gives_utterances_separated_by_the_readers_pauses(
    recordings: Recordings,
) -> None:
    by_recording = {
        name: [u.clip for u in recordings.utterances if u.clip.recording == name]
        for name in RECORDINGS
    }
    assert all(by_recording.values()), by_recording
    for name, clips in by_recording.items():
        audio = recordings.audio[name]
        for clip in clips:
            assert 0 <= clip.start_ms < clip.end_ms <= audio.size // 8
        texts = {u.clip: u.text for u in recordings.utterances}
        for before, after in itertools.pairwise(clips):
            # An utterance pause, or the reader's pause where a sentence ended.
            assert after.start_ms - before.end_ms >= UTTERANCE_PAUSE_MS or (
                texts[before].endswith((".", "?", "!")) and after.start_ms > before.end_ms
            )
            # The silence between two utterances is quieter than the speech on either side.
            gap = recordings.clip(Clip(name, before.end_ms, after.start_ms))
            speech = np.concatenate([recordings.clip(before), recordings.clip(after)])
            assert np.median(frame_levels_db(gap)) < np.median(frame_levels_db(speech)) - 10


def test_a_paused_recorded_turn_stops_between_words_the_reader_said_without_stopping(
    recordings: Recordings,
) -> None:
    scripts = corpus_scripts(seed=4, calls=24, recordings=recordings)
    recorded = [s for s in scripts if s.voice.engine == RECORDED]
    assert len(recorded) == 6, "a quarter of the calls"
    paused = [say for s in recorded for say in s.turns if say.kind is Kind.PAUSE]
    assert paused
    utterances = {u.clip: u for u in recordings.utterances}
    for say in paused:
        first, pause_ms, rest = say.parts
        assert isinstance(first, Clip) and isinstance(rest, Clip) and isinstance(pause_ms, int)
        assert 400 <= pause_ms <= 1800
        whole = Clip(first.recording, first.start_ms, rest.end_ms)
        assert first.end_ms == rest.start_ms and whole in utterances
        # The reader's own pause there was a gap between words (the readers pause 300 ms
        # and more at commas), and there is speech on both sides.
        [(a, b)] = [(a, b) for a, b in utterances[whole].inner_pauses if a <= first.end_ms <= b]
        # ...and the utterance is one sentence: the reader had not finished.
        assert not utterances[whole].sentences_inside, utterances[whole].text
        assert 80 <= b - a <= 250
        assert first.end_ms - first.start_ms >= 300 and rest.end_ms - rest.start_ms >= 300


def _long_ones_two_sentences(clip: np.ndarray) -> Heard:
    """A listener that hears two sentences in each clip over 3 s, without word times
    (so no cut is found), and one in the others."""
    if clip.size > 3 * 8000:
        return Heard("It was the best of times. It was the worst of times.")
    return Heard("It was the best of times, it was the worst of times.")


def test_an_utterance_of_several_sentences_is_never_paused() -> None:
    recordings = Recordings(hear=_long_ones_two_sentences)
    several = [u for u in recordings.utterances if u.sentences_inside]
    assert several and len(several) < len(recordings.utterances)
    assert all(u.split_points() == [] for u in several)
    scripts = [s for seed in range(4) for s in corpus_scripts(seed, 24, recordings)]
    paused = [
        say.parts[0]
        for s in scripts
        if s.voice.engine == RECORDED
        for say in s.turns
        if say.kind is Kind.PAUSE
    ]
    assert paused
    assert not any(
        isinstance(first, Clip)
        and u.clip.recording == first.recording
        and u.clip.start_ms == first.start_ms
        for u in several
        for first in paused
    )


def _short_ones_a_yes(clip: np.ndarray) -> Heard:
    """A listener that hears "Yes." in each clip under 2 s, a line in the others."""
    if clip.size < 2 * 8000:
        return Heard("Yes.")
    return Heard("It was the best of times, it was the worst of times.")


def test_a_recorded_caller_interrupts_with_a_lines_words_never_with_a_yes() -> None:
    recordings = Recordings(hear=_short_ones_a_yes)
    text_of = {(u.clip.recording, u.clip.start_ms): u.text for u in recordings.utterances}
    assert "Yes." in text_of.values()
    scripts = [
        s
        for seed in range(4)
        for s in corpus_scripts(seed, 12, recordings, recorded_share=1.0, over_every_reply=True)
    ]
    spoken = [say.parts[0] for s in scripts for say in s.turns if isinstance(say.parts[0], Clip)]
    assert any(text_of[(c.recording, c.start_ms)] == "Yes." for c in spoken), "still said"
    interrupting = [
        say.parts[0] for s in scripts for say in s.turns if say.kind is Kind.INTERRUPTION
    ]
    assert interrupting
    for clip in interrupting:
        assert isinstance(clip, Clip)
        assert len(text_of[(clip.recording, clip.start_ms)].split()) >= 3


def test_what_the_listener_hears_decides_which_utterances_may_be_paused() -> None:
    one = Recordings(hear=lambda clip: Heard("It was the best of times, it was the worst."))
    # Two sentences, the first ending where the reader did not stop: said whole.
    two = Recordings(hear=lambda clip: Heard("Ever tried? Ever failed."))
    assert any(u.split_points() for u in one.utterances)
    assert all(u.split_points() == [] for u in two.utterances)
    for u in one.utterances:
        assert not u.sentences_inside


def test_an_utterance_is_cut_into_turns_where_its_sentences_end_at_a_pause() -> None:
    utterance = Utterance(Clip("x.wav", 1000, 5000), ((1500, 1600), (2900, 3400), (4000, 4100)))
    # The first sentence's last word ends 80 ms before the reader's 500 ms pause.
    pieces = by_sentence(utterance, Heard("Do you hear me? Yes, I do.", (1820,)))
    assert pieces == [
        Utterance(Clip("x.wav", 1000, 2900), ((1500, 1600),), "Do you hear me?"),
        Utterance(Clip("x.wav", 3400, 5000), ((4000, 4100),), "Yes, I do."),
    ]
    assert not any(p.sentences_inside for p in pieces)
    # A sentence end at no pause (the reader ran on) leaves the sentences as one turn.
    [whole] = by_sentence(utterance, Heard("Do you hear me? Yes, I do.", (1200,)))
    assert whole.clip == utterance.clip and whole.sentences_inside
    assert whole.split_points() == []
    # Times that do not match the text's sentences cut nothing, and neither do times that
    # would make a piece shorter than its words can be said.
    [kept] = by_sentence(utterance, Heard("Do you hear me? Yes. I do.", (1820,)))
    assert kept.clip == utterance.clip
    early = Utterance(Clip("x.wav", 1000, 5000), ((1080, 1140), (2900, 3400)))
    [whole] = by_sentence(early, Heard("I do. I think that it could do it very well.", (100,)))
    assert whole.clip == early.clip


def _reading_with_a_tail(tail_ms: int) -> np.ndarray:
    """A second of room, a second of a voice at speaking level, a fainter sound for
    `tail_ms` (25 dB under the voice, still well over the room), then the room again."""
    rng = np.random.default_rng(0)
    t = np.arange(8000) / 8000
    voice = 10000 * np.sin(2 * np.pi * 220 * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))
    parts = [
        rng.normal(0, 10, 8000),
        voice,
        rng.normal(0, 400, tail_ms * 8),
        rng.normal(0, 10, 8000),
    ]
    return np.concatenate(parts).astype(np.int16)


def test_a_turn_ends_with_the_readers_last_word_not_with_a_breath_after_it() -> None:
    [breath] = find_utterances("x.wav", _reading_with_a_tail(800))
    assert breath.clip == Clip("x.wav", 1000, 2800)
    assert breath.loud_end_ms == 2000
    # The listener's last word ended at the voice's end: the turn ends there too, and a
    # bot that answers during the breath has not talked over the reader.
    [turn] = by_sentence(breath, Heard("Fail better.", (), 980))
    assert turn.clip == Clip("x.wav", 1000, 2000) and turn.text == "Fail better."
    # Words heard in the faint part (a word said softly) keep it in the turn, and so does
    # a listener that did not time its words.
    [soft] = by_sentence(breath, Heard("Fail better, again.", (), 1600))
    assert soft.clip == breath.clip
    [untimed] = by_sentence(breath, Heard("Fail better."))
    assert untimed.clip == breath.clip
    # The reader's pauses inside the breath are not the turn's.
    tail = Utterance(Clip("x.wav", 1000, 3000), ((1500, 1600), (2300, 2400)), "", 2000)
    [kept] = by_sentence(tail, Heard("Fail better.", (), 900))
    assert kept.clip == Clip("x.wav", 1000, 2000) and kept.inner_pauses == ((1500, 1600),)
    # A word's own faint last sound (a fricative after its vowel) is the word's.
    [word] = find_utterances("x.wav", _reading_with_a_tail(FAINT_TAIL_MS - 100))
    assert word.loud_end_ms is None and word.clip.end_ms == 2000 + FAINT_TAIL_MS - 100


def test_every_recorded_turn_ends_at_a_speaking_level(recordings: Recordings) -> None:
    for name, audio in recordings.audio.items():
        levels = frame_levels_db(audio)
        floor, peak = np.percentile(levels, [10, 95])
        loud = floor + LOUD_SHARE * (peak - floor)
        for u in (u for u in recordings.utterances if u.clip.recording == name):
            last = levels[(u.clip.end_ms - FAINT_TAIL_MS - 20) // 20 : u.clip.end_ms // 20]
            assert last.max() >= loud, u.clip.label


def test_the_plays_two_voices_are_never_one_turn(recordings: Recordings) -> None:
    # Nagg asks and Nell answers 520-540 ms later, inside one utterance pause: as turns,
    # the question ends one and the answer starts the next.
    scene = [u for u in recordings.utterances if u.clip.recording == "endgame_nagg_nell.wav"]
    assert scene
    assert not any(re.search(r"\?\s+\S", u.text) for u in scene), [u.text for u in scene]


def test_a_recorded_call_is_played_as_recorded_with_its_scripted_pause(
    recordings: Recordings,
) -> None:
    scripts = corpus_scripts(seed=4, calls=24, recordings=recordings)
    script = next(
        s
        for s in scripts
        if s.voice.engine == RECORDED and any(t.kind is Kind.PAUSE for t in s.turns)
    )
    lines = [say for say in script.turns if say.after is not After.BOT_SPEAKING]
    assert len(lines) == TURNS_PER_CALL
    prepared = prepare(script, 4, Voices(recordings))
    for say, turn, facts in zip(script.turns, prepared.turns, prepared.facts, strict=True):
        clips = [p for p in say.parts if isinstance(p, Clip)]
        pause = sum(p for p in say.parts if isinstance(p, int))
        if not clips:
            continue  # a recorded caller's backchannel is synthesised
        assert turn.audio is not None
        assert turn.audio.size == sum(recordings.clip(c).size for c in clips) + pause * 8
        if pause:
            [(start, end)] = facts.pauses_ms
            assert end - start == pause
            assert not np.any(turn.audio[int(start * 8) : int(end * 8)])


def test_each_kind_of_caller_is_split_between_the_halves(recordings: Recordings) -> None:
    for seed in range(6):
        scripts = corpus_scripts(seed=seed, calls=12, recordings=recordings)
        assert sum(s.voice.engine == RECORDED for s in scripts) == 3, seed
        half_of = halves(seed, scripts)
        assert abs(list(half_of.values()).count("held-out") - 6) <= 1
        for engine in {s.voice.engine for s in scripts}:
            mine = [half_of[s.name] for s in scripts if s.voice.engine == engine]
            assert abs(mine.count("held-out") - mine.count("tuning")) <= 1, (seed, engine)


def test_a_larger_recorded_share_makes_more_of_the_calls_recorded_people(
    recordings: Recordings,
) -> None:
    for share, expected in ((0.0, 0), (0.5, 4), (1.0, 8)):
        scripts = corpus_scripts(seed=5, calls=8, recordings=recordings, recorded_share=share)
        assert sum(s.voice.engine == RECORDED for s in scripts) == expected, share
    # Every call recorded, and still each utterance once in a run while there are enough.
    everyone = corpus_scripts(seed=5, calls=4, recordings=recordings, recorded_share=1.0)
    said = [say.parts[0] for s in everyone for say in s.turns if isinstance(say.parts[0], Clip)]
    interruptions = sum(say.kind is Kind.INTERRUPTION for s in everyone for say in s.turns)
    assert len(said) == 4 * TURNS_PER_CALL + interruptions
    assert len({(c.recording, c.start_ms) for c in said}) == len(said)
    with pytest.raises(SystemExit, match="0 to 1"):
        corpus_scripts(seed=5, calls=8, recordings=recordings, recorded_share=1.5)


def test_the_synthesised_calls_of_a_seed_are_the_same_with_recorded_callers_among_them(
    recordings: Recordings,
) -> None:
    synthetic = corpus_scripts(seed=9, calls=16)
    mixed = corpus_scripts(seed=9, calls=16, recordings=recordings)
    assert any(s.voice.engine == RECORDED for s in mixed)
    for before, now in zip(synthetic, mixed, strict=True):
        if now.voice.engine != RECORDED:
            assert now == before


def test_a_recording_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    for name in RECORDINGS:
        shutil.copy(assets_dir() / name, tmp_path / name)
    altered = bytearray((tmp_path / "beckett.wav").read_bytes())
    altered[-1] ^= 1
    (tmp_path / "beckett.wav").write_bytes(bytes(altered))

    with pytest.raises(SystemExit, match="not the recording pinned"):
        _ = Recordings(tmp_path).audio
