"""Whisper's words are judged by evidence, never by what they say.

"Thank you" and "bye" are among the commonest things said on a phone call, and among
Whisper's commonest inventions on noise. The transcriber keeps them and reports its own
evidence; `assess` weighs it with the VAD's into HEARD, UNCLEAR (ask again) or NOTHING.

The real-model tests run the bundled tiny.en (the default STT) on audio made the way a
call makes it: espeak-ng, 8 kHz mu-law, the call's front end (its VAD gives speech_ms).
The thresholds come from `python -m benchmarks stt-evidence`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from agents.cascade.stt import (
    MIN_SPEECH_MS,
    WORDS_OUTWEIGH_SILENCE_MS,
    Hearing,
    Transcript,
    WhisperTranscriber,
    assess,
    average_logprob,
    collapse_loop,
    repeats_itself,
    spoken_words,
)
from app.assets import ModelCache
from app.settings import Settings
from benchmarks.stt_evidence import Clip, front_end
from ops.caller_voice import LINE_RATE, speak
from ops.line import active_rms, babble

pytestmark = pytest.mark.slow  # real Whisper on synthesised speech

# --- the verdict, as a table --------------------------------------------------------------
# Rows are measured transcripts (benchmarks/stt_evidence.py) or the cases around them.

HEARD_CASES = [
    ("thank you, clearly", Transcript("Thank you.", 0.26, avg_logprob=-0.12), 704),
    ("a fast 'bye'", Transcript("Bye", 0.54, avg_logprob=-0.73), 224),
    ("a short word Whisper half expects to be silence", Transcript("Right.", 0.66, -0.40), 320),
    ("a hesitant but plausible word", Transcript("Yay", 0.40, avg_logprob=-1.37), 384),
    ("a question", Transcript("What time do you open on Saturday?", 0.18, -0.41), 2272),
    ("a fake's transcript: no evidence given is no doubt", Transcript("Bye.", 0.0), 800),
    (
        "a caller who says it twice, confidently",
        Transcript("I want to cancel. I want to cancel my order.", 0.26, avg_logprob=-0.18),
        2900,
    ),
    (
        "a doubtful sentence that does not repeat itself",
        Transcript("I'm going to be able to make it today.", 0.3, avg_logprob=-1.2),
        2500,
    ),
]

UNCLEAR_CASES = [
    ("speech, and Whisper wrote nothing", Transcript("", 0.2), 800),
    ("speech, and only punctuation came out", Transcript(". . .", 0.3, avg_logprob=-0.1), 800),
    ("speech, and only a sound caption came out", Transcript("[BLANK_AUDIO]", 0.2), 800),
    ("words Whisper barely believes", Transcript("5", 0.60, avg_logprob=-1.65), 416),
    ("reversed speech", Transcript("He is a man, I am glad.", 0.14, avg_logprob=-1.68), 2464),
    ("confident words Whisper thinks are silence", Transcript("Thank you.", 0.92, -0.75), 800),
    (
        "seconds of speech Whisper cannot follow (French to tiny.en)",
        Transcript("I'm going to be doing it.", 0.65, avg_logprob=-1.9),
        3008,
    ),
    (
        "a one-word question Whisper votes silence on (Piper's 'Parking?' in calls)",
        Transcript("working", 0.65, avg_logprob=-1.2),
        380,
    ),
    # The price: background talk starting mid-call, before the speech gate has its level,
    # is asked about once rather than ignored.
    ("background talk the VAD let through", Transcript("I can't wait.", 0.80, -1.31), 1152),
    ("base's invention on babble", Transcript("I'm not going to do it.", 0.67, -1.47), 1152),
    (
        "Whisper's repetition loop on Spanish it cannot follow (measured in a call)",
        Transcript("I'm not going to be able to do it, but I'm not going to do it.", 0.46, -1.22),
        3140,
    ),
    (
        "a repetition loop Whisper half believes (espeak Spanish, offline)",
        Transcript(
            "We are going to be doing this, and we will be doing this, and we will", 0.47, -0.87
        ),
        3300,
    ),
]

NOTHING_CASES = [
    ("no speech at all, whatever the words", Transcript("Thank you.", 0.1, -0.1), 0),
    ("a blip too short for a word", Transcript("Thank you very much.", 0.92, -0.75), 192),
    ("just under the shortest word", Transcript("Bye.", 0.1, -0.5), MIN_SPEECH_MS - 1),
    ("a cough's invented word in a blip", Transcript("You", 0.84, -1.96), 280),
    ("hiss: punctuation Whisper calls silence", Transcript(". . . .", 0.95, -0.09), 800),
    ("empty, and Whisper calls it silence", Transcript("", 0.7), 800),
]


def _cases(cases: list[tuple[str, Transcript, int]]) -> list[object]:
    return [pytest.param(t, ms, id=name) for name, t, ms in cases]


@pytest.mark.parametrize(("transcript", "speech_ms"), _cases(HEARD_CASES))
def test_words_with_speech_behind_them_are_heard(transcript: Transcript, speech_ms: int) -> None:
    assert assess(transcript, speech_ms=speech_ms) is Hearing.HEARD


@pytest.mark.parametrize(("transcript", "speech_ms"), _cases(UNCLEAR_CASES))
def test_speech_without_reliable_words_is_unclear(transcript: Transcript, speech_ms: int) -> None:
    assert assess(transcript, speech_ms=speech_ms) is Hearing.UNCLEAR


@pytest.mark.parametrize(("transcript", "speech_ms"), _cases(NOTHING_CASES))
def test_no_speech_evidence_is_nothing(transcript: Transcript, speech_ms: int) -> None:
    assert assess(transcript, speech_ms=speech_ms) is Hearing.NOTHING


@pytest.mark.parametrize(
    "text", ["thank you.", "Thank you.", "bye.", "Bye.", "you", "Thanks for watching!"]
)
def test_no_phrase_is_dropped_for_what_it_says(text: str) -> None:
    assert assess(Transcript(text, 0.2, avg_logprob=-0.3), speech_ms=600) is Hearing.HEARD


@pytest.mark.parametrize(
    ("text", "repeats"),
    [
        ("I'm going to be doing this, and I'm going to be doing this.", True),
        ("Can you hear me? Can you hear me?", True),
        ("I want to cancel my order.", False),
        ("Bye bye bye bye", False),  # one word four times: a loop `collapse_loop` handles
        ("yes yes yes yes yes yes yes yes", True),
        ("to be or not to be", False),  # two words again, not four
    ],
)
def test_a_sentence_repeats_itself_when_four_words_come_again(text: str, repeats: bool) -> None:
    assert repeats_itself(text) is repeats


def test_the_shortest_word_the_vad_measured_counts_as_speech() -> None:
    assert assess(Transcript("Bye.", 0.1, -0.5), speech_ms=MIN_SPEECH_MS) is Hearing.HEARD


def test_transcripts_are_still_built_positionally() -> None:
    transcript = Transcript("hello", 0.1)
    assert (transcript.text, transcript.no_speech_prob) == ("hello", 0.1)
    assert transcript.avg_logprob == 0.0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Bye", True),
        ("5", True),
        ("", False),
        (". . . .", False),
        ("...", False),
        ("[BLANK_AUDIO]", False),
        ("(coughs)", False),
        ("♪", False),
        ("(laughs) okay", True),
    ],
)
def test_spoken_words_are_not_punctuation_or_sound_captions(text: str, words: bool) -> None:
    assert spoken_words(text) is words


@pytest.mark.parametrize(
    ("looped", "said"),
    [
        (" ".join(["Goodbye"] * 32), "Goodbye"),
        ("Thank you. Thank you. Thank you. Thank you. Thank", "Thank you."),
        (" ".join(["Goodbye"] * 31) + " Goodb", "Goodbye"),  # the limit cut a word's tokens
        ("Goodbye Goodbye Goodb", "Goodbye Goodbye Goodb"),  # three copies are no loop
        ("my pin is 10 10 10 1", "my pin is 10 10 10 1"),  # digits said, not a cut copy
        ("What time on Saturday Saturday Saturday Saturday Saturday", "What time on Saturday"),
        ("no, no, no, no.", "no"),
        ("My account number is" + " 4 5 6 7 8 9" * 8, "My account number is 4 5 6 7 8 9"),
        ("It is 4 5 6 7 8 9 4 5 6 7 8 9.", "It is 4 5 6 7 8 9 4 5 6 7 8 9."),
        ("Right. Right.", "Right. Right."),
        ("bye bye bye", "bye bye bye"),
        ("What time do you open?", "What time do you open?"),
        ("", ""),
    ],
)
def test_a_decoder_loop_keeps_one_copy(looped: str, said: str) -> None:
    assert collapse_loop(looped) == said


def test_avg_logprob_is_faster_whispers() -> None:
    # tiny.en on espeak "Thank you.": CTranslate2 scored [Thank, you, .] -0.270199 (the sum
    # of the four log-probabilities, end token included, over 3). From the logits the four
    # were -0.40446, -0.08004, -0.21981, -0.10636: their mean is -0.20267.
    assert average_logprob(-0.2701994, 3) == pytest.approx(-0.20267, abs=1e-4)
    assert average_logprob(-1.0, 0) == 0.0


# --- the real tiny.en on phone audio -------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> Iterator[WhisperTranscriber]:
    cache = ModelCache(Settings.from_env({}).model_cache_dir)
    yield WhisperTranscriber(cache.path("whisper-tiny.en"), threads=2)


def _through_the_call(
    pcm: np.ndarray, background: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """What Whisper is given for a turn holding `pcm`, and the speech the VAD found in it."""
    return front_end(Clip("", "", pcm.astype(np.int16), background))


def _hear(
    stt: WhisperTranscriber, pcm: np.ndarray, background: np.ndarray | None = None
) -> tuple[Transcript, int]:
    audio, speech_ms = _through_the_call(pcm, background)
    return stt.transcribe(audio), speech_ms


@pytest.mark.parametrize(("said", "word"), [("Thank you.", "thank you"), ("Bye.", "bye")])
def test_a_caller_saying_thanks_or_bye_is_heard(
    tiny: WhisperTranscriber, said: str, word: str
) -> None:
    transcript, speech_ms = _hear(tiny, speak(said))
    assert word in transcript.text.lower()
    assert assess(transcript, speech_ms=speech_ms) is Hearing.HEARD


def test_a_question_is_heard_with_its_evidence(tiny: WhisperTranscriber) -> None:
    transcript, speech_ms = _hear(tiny, speak("What time do you open on Saturday?"))
    assert "saturday" in transcript.text.lower()
    assert speech_ms > 1000
    assert transcript.no_speech_prob < 0.5
    assert -1.0 < transcript.avg_logprob < 0.0
    assert transcript.audio_s == pytest.approx(speech_ms / 1000 + 0.9, abs=0.6)


def _noise(kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    rng = np.random.default_rng(3)
    if kind == "silence":
        return np.zeros(2 * LINE_RATE, np.int16), None
    if kind == "hiss":  # white noise at -45 dBFS, on the line before the turn too
        hiss = np.rint(rng.standard_normal(5 * LINE_RATE) * 32768 * 10 ** (-45 / 20))
        return hiss[3 * LINE_RATE :].astype(np.int16), hiss[: 3 * LINE_RATE].astype(np.int16)
    # A cough: a burst of noise, sharp attack, 80 ms decay, peaking near -8 dBFS.
    t = np.arange(int(0.3 * LINE_RATE)) / LINE_RATE
    burst = rng.standard_normal(t.size) * np.minimum(1.0, t / 0.008) * np.exp(-t / 0.08)
    return np.rint(burst / np.max(np.abs(burst)) * 13000).astype(np.int16), None


@pytest.mark.parametrize("kind", ["silence", "hiss", "cough"])
def test_non_speech_is_nothing(tiny: WhisperTranscriber, kind: str) -> None:
    transcript, speech_ms = _hear(tiny, *_noise(kind))
    assert assess(transcript, speech_ms=speech_ms) is Hearing.NOTHING
    # Had the VAD let a blip of it through, Whisper's own evidence still calls it no speech.
    assert assess(transcript, speech_ms=WORDS_OUTWEIGH_SILENCE_MS - 20) is Hearing.NOTHING


def test_speech_that_is_not_words_is_unclear(tiny: WhisperTranscriber) -> None:
    backwards = speak("Can I speak to someone about my bill, please?")[::-1]
    transcript, speech_ms = _hear(tiny, backwards)
    assert speech_ms > 1000
    assert assess(transcript, speech_ms=speech_ms) is Hearing.UNCLEAR


@pytest.mark.parametrize("engine", ["espeak", "piper"])
def test_a_last_word_not_in_the_audio_is_dropped_after_a_dangling_word(
    tiny: WhisperTranscriber, engine: str
) -> None:
    # A caller pausing after "for": tiny.en wrote "a table for it." in bench turns (and
    # on both voices here), a finished sentence that ended the caller's turn mid-way.
    words = speak("I'd like to book a table for", engine=engine)
    audio, _ = _through_the_call(np.concatenate([words, np.zeros(LINE_RATE // 2, np.int16)]))
    # (espeak's "book" comes back "work", Piper's "a" now and then "the": what matters
    # here is the end; Piper's voice varies from one synthesis to the next)
    assert tiny.transcribe(audio).text.rstrip(".").endswith("table for")
    said = tiny.heard_text(audio, "I'd like to book a table for it.")
    assert said.rstrip(".") == "I'd like to book a table for"


@pytest.mark.parametrize("engine", ["espeak", "piper"])
@pytest.mark.parametrize(
    "said",
    [
        "I'm looking for it.",
        "I'd like a table for two.",
        "Can I pay with it?",
        # Piper's quiet "it" lies 18-31 dB under the speech (Whisper sure of it, p >= 0.9)
        "I already paid for it.",
        "Take care of it.",
    ],
)
def test_a_spoken_last_word_after_a_dangling_word_is_kept(
    tiny: WhisperTranscriber, said: str, engine: str
) -> None:
    # Piper draws a new rendering at each synthesis, and on a rare one the rule drops a
    # spoken ending: "I'm looking for" for "I'm looking for it." in one clean-clone run
    # (2026-12-07), against none in 150 renderings drawn by hand the same day. So Piper
    # is heard five times and one miss is allowed; a rule that drops spoken endings
    # misses them all. espeak renders the same audio every time: once, no miss.
    renderings, allowed_misses = (5, 1) if engine == "piper" else (1, 0)
    # Kept means a word still follows the dangling one. Which word is Whisper's accuracy,
    # not the drop rule's: one Piper rendering in ~100 of "for two" came back "for tubes".
    *_, dangling, _last = said.lower().rstrip(".?").split()
    missed = []
    for _ in range(renderings):
        transcript, _ = _hear(tiny, speak(said, engine=engine))
        heard = transcript.text.lower().rstrip(".?!").split()
        if not heard or heard[-1] == dangling or len(heard) < len(said.split()):
            missed.append(transcript.text)
    assert len(missed) <= allowed_misses, missed


@pytest.mark.parametrize(
    ("said", "engine", "seed"),
    [
        # Under babble these endings lie 12-14 dB below the speech at p 0.7-0.8.
        ("Can I pay with it?", "espeak", 12),
        ("I already paid for it.", "piper", 10),
        ("I already paid for it.", "piper", 12),
    ],
)
def test_a_spoken_last_word_after_a_dangling_word_is_kept_under_babble(
    tiny: WhisperTranscriber, said: str, engine: str, seed: int
) -> None:
    words = speak(said, engine=engine)
    pcm = np.concatenate([words, np.zeros(LINE_RATE // 2, np.int16)]).astype(np.float64)
    noise = babble(pcm.size / LINE_RATE + 0.1, np.random.default_rng(seed))[: pcm.size]
    noisy = pcm + noise * active_rms(words) / 10 ** (15 / 20)  # a cafe, 15 dB SNR
    transcript, _ = _hear(tiny, np.clip(noisy, -32768, 32767))
    *_, dangling, _last = said.lower().rstrip(".?").split()
    heard = transcript.text.lower().rstrip(".?!").split()
    assert heard and heard[-1] != dangling, transcript.text
