"""Speech to text with faster-whisper's CTranslate2 Whisper, loaded from the model cache.

Whisper's encoder is trained on 30 s windows, and faster-whisper always pads to 30 s,
so the encoder costs the same for a two-second phone turn as for thirty seconds of
speech. CTranslate2 accepts shorter windows: we pad to the next 5 s step (at least
10 s), which keeps transcripts the same on phone-turn audio and makes the encoder
3-5x faster. That time is the largest part of what a caller waits for.

Whisper writes words on anything, silence and coughs included, and "thank you" or "bye"
are among its favourite inventions, as they are among a caller's favourite words. So no
text is ever dropped for what it says: `transcribe` returns what Whisper decoded with
Whisper's own evidence, and `assess` weighs that with the VAD's (how much speech the
utterance held) into HEARD, UNCLEAR (ask again) or NOTHING (ignore).

An operator's names and words (STT_HOTWORDS) go before each turn as the text Whisper
heard before it, as faster-whisper's `hotwords` does: a name spelled as written there
is heard more often (`python -m benchmarks hotwords`).

One thing it does take out: a last word that is not in the audio. A caller who pauses
after a preposition is often transcribed with one more word and a full stop (tiny.en
more than base), a finished sentence that ends their turn in the middle. When the
words before the last one stop where a sentence cannot, Whisper's own cross-attention
alignment (the one faster-whisper's word timestamps use) says where the last word is:
with no audio under it and a low probability, it was Whisper completing the sentence,
and it is dropped.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agents.errors import SpeechToTextError
from agents.turns.text import looks_unfinished

log = logging.getLogger(__name__)

FRAMES_PER_SECOND = 100  # Whisper log-mel frames (10 ms hop)
MIN_WINDOW_S = 10  # shorter windows degrade transcripts noticeably
WINDOW_STEP_S = 5
MAX_WINDOW_S = 30
ALIGN_TOKENS_PER_S = 50  # encoder frames (2 mel frames each)
# A last word with no frame under its alignment within this much of the utterance's
# speech, at this probability or less, was not said. tiny.en's "it" after a paused "for"
# (bench calls, espeak, Piper at 165 wpm): 27-98 dB down at p 0.35-0.79 (the alignment
# can lay it over the tail of "for": 27-34 dB). Words said there, 24 endings ("for two",
# "for it", "of it", "with this", "on me"...) on espeak and Piper at 140 and 185 wpm:
# those at p <= 0.85 all within 4 dB of the speech; those 18-31 dB down all at p >= 0.9.
# Over a noisy line the pause is not that quiet, and the word is kept. Not 20 dB: on the
# echo line tiny.en's invented pronoun (p 0.58) was 18.5 dB down, and the bot
# answered into a 1.5 s pause. Said words at p <= 0.85 after a dangling word, under babble
# at 15 dB SNR (espeak and Piper, 10 sentences, 3 seeds): at most 13.8 dB down.
UNHEARD_BELOW_SPEECH_DB = 16.0
UNHEARD_MAX_PROB = 0.85
# Whisper's decoder holds 448 positions; faster-whisper gives previous text (its
# `hotwords`) half of its 224-token output length at most, and so do we.
DECODER_POSITIONS = 448
MAX_PREVIOUS_TOKENS = 111
# How an operator separates STT_HOTWORDS' names: commas, as documented, or semicolons or
# lines (a list pasted from a file).
_LIST_SEPARATOR = re.compile(r"\s*[,;\n]\s*")
_NAMES_LOGGED = 10  # a warning names this many of those left out


@dataclass(frozen=True, slots=True)
class Transcript:
    """What Whisper heard, with its own evidence for how far to trust it (see `assess`)."""

    text: str
    # Whisper's probability of its no-speech token at the first decoding step.
    no_speech_prob: float
    # Mean log-probability of the decoded tokens and the end token, as faster-whisper's
    # `avg_logprob`. 0.0 (certain) when not measured, as in fakes.
    avg_logprob: float = 0.0
    audio_s: float = 0.0  # seconds of audio transcribed


class SpeechToText(Protocol):
    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        """Blocking: call it from a worker thread."""
        ...


def window_frames(content_frames: int, min_window_s: int = MIN_WINDOW_S) -> int:
    """Encoder window for `content_frames` of audio: ≥ 10 s, in 5 s steps, ≤ 30 s."""
    seconds = max(
        min_window_s, -(-content_frames // (FRAMES_PER_SECOND * WINDOW_STEP_S)) * WINDOW_STEP_S
    )
    return min(seconds, MAX_WINDOW_S) * FRAMES_PER_SECOND


class WhisperTranscriber:
    """Whisper on one phone turn (the last 30 s at most), without timestamps.

    Greedy with a 10 s window by default; `python -m benchmarks stt` measures the choices.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 2,
        language: str = "en",
        min_window_s: int = MIN_WINDOW_S,
        beam_size: int = 1,
        hotwords: str = "",
    ) -> None:
        """`hotwords`: words callers are likely to say (names, products), given to
        Whisper as the text before the audio, as faster-whisper's own `hotwords` does."""
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        self._whisper = WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads, num_workers=1
        )
        multilingual = self._whisper.model.is_multilingual
        self._tokenizer = Tokenizer(
            self._whisper.hf_tokenizer,
            multilingual,
            task="transcribe",
            language=language if multilingual else "en",
        )
        self._prompt = [
            *_previous_text(self._tokenizer, hotwords),
            *self._tokenizer.sot_sequence,
            self._tokenizer.no_timestamps,
        ]
        self._min_window_s = min_window_s
        self._beam_size = beam_size
        # The feature extractor keeps per-call state; CTranslate2 serialises on its own.
        self._features_lock = threading.Lock()

    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        import ctranslate2

        audio = np.ascontiguousarray(audio_16k[-MAX_WINDOW_S * 16000 :], dtype=np.float32)
        try:
            with self._features_lock:
                features = self._whisper.feature_extractor(audio)
            content = features.shape[-1] - 1  # the extractor adds one frame of padding
            frames = window_frames(content, self._min_window_s)
            window = np.zeros((1, features.shape[0], frames), dtype=np.float32)
            window[0, :, :content] = features[:, :content]
            encoded = self._whisper.model.encode(ctranslate2.StorageView.from_array(window))
            result = self._whisper.model.generate(
                encoded,
                [self._prompt],
                beam_size=self._beam_size,
                max_length=max_length(len(self._prompt), content),
                return_no_speech_prob=True,
                return_scores=True,
                suppress_blank=True,
                suppress_tokens=[-1],
            )[0]
        except Exception as exc:  # CTranslate2 raises plain RuntimeErrors
            raise SpeechToTextError(f"whisper failed: {exc}") from exc
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        tokens = self._without_unheard_ending(audio, encoded, content, tokens)
        return Transcript(
            text=collapse_loop(self._tokenizer.decode(tokens).strip()),
            no_speech_prob=float(result.no_speech_prob),
            avg_logprob=average_logprob(float(result.scores[0]), len(result.sequences_ids[0])),
            audio_s=audio.size / 16000,
        )

    def heard_text(self, audio_16k: np.ndarray, text: str) -> str:
        """`text` as Whisper's alignment finds it in `audio_16k`, less an ending that is
        not in the audio (see the module's doc). For tests and tools."""
        import ctranslate2

        audio = np.ascontiguousarray(audio_16k[-MAX_WINDOW_S * 16000 :], dtype=np.float32)
        with self._features_lock:
            features = self._whisper.feature_extractor(audio)
        content = features.shape[-1] - 1
        window = np.zeros((1, features.shape[0], window_frames(content)), dtype=np.float32)
        window[0, :, :content] = features[:, :content]
        encoded = self._whisper.model.encode(ctranslate2.StorageView.from_array(window))
        tokens = self._tokenizer.encode(" " + text.strip())
        kept = self._without_unheard_ending(audio, encoded, content, tokens)
        return self._tokenizer.decode(kept).strip()

    def _without_unheard_ending(
        self, audio: np.ndarray, encoded: object, content_frames: int, tokens: list[int]
    ) -> list[int]:
        """`tokens` less their last word if it stands on no audio after a dangling word."""
        tokenizer = self._tokenizer
        words, word_tokens = tokenizer.split_to_word_tokens([*tokens, tokenizer.eot])
        words, word_tokens = words[:-1], word_tokens[:-1]  # the end token
        spoken = [i for i, word in enumerate(words) if any(ch.isalnum() for ch in word)]
        if len(spoken) < 2 or not looks_unfinished("".join(words[: spoken[-1]])):
            return tokens  # the common case: nothing to check, no extra decoder pass
        try:
            aligned = self._whisper.model.align(
                encoded, tokenizer.sot_sequence, [tokens], [content_frames], median_filter_width=7
            )[0]
        except Exception as exc:  # CTranslate2's RuntimeErrors: keep the words as decoded
            log.warning("whisper alignment failed: %s", exc)
            return tokens
        text_index = np.array([pair[0] for pair in aligned.alignments])
        time_index = np.array([pair[1] for pair in aligned.alignments])
        if text_index.size == 0:
            return tokens
        jumps = np.pad(np.diff(text_index), (1, 0), constant_values=1).astype(bool)
        jump_s = time_index[jumps] / ALIGN_TOKENS_PER_S
        bounds = np.cumsum([0, *(len(t) for t in word_tokens)])
        last = spoken[-1]
        if bounds[last + 1] >= jump_s.size:
            return tokens
        begin_s, end_s = float(jump_s[bounds[last]]), float(jump_s[bounds[last + 1]])
        probability = float(np.mean(aligned.text_token_probs[bounds[last] : bounds[last + 1]]))
        below_db = _below_speech_db(audio, begin_s, end_s)
        if probability <= UNHEARD_MAX_PROB and below_db >= UNHEARD_BELOW_SPEECH_DB:
            log.debug(
                "dropped an ending not in the audio (%.0f dB down, p=%.2f)", below_db, probability
            )
            return tokens[: bounds[last]]
        return tokens


def max_length(prompt_tokens: int, content_frames: int) -> int:
    """CTranslate2's `max_length` for Whisper that lets it write as many tokens after any
    prompt as after the bare one: about one per 80 ms of audio, and 24 more.

    CTranslate2 decodes min(max_length / 2, max_length - (prompt - 1)) tokens (its
    whisper.cc), so the bare prompt's two tokens leave half of `max_length`; a longer
    prompt needs `max_length` raised by its length, or it would leave fewer (none: "the
    maximum decoding length must be > 0"), and no more than that, or it would leave more.
    """
    budget = min(224, 48 + content_frames // 8) // 2
    return min(DECODER_POSITIONS, max(2 * budget, prompt_tokens - 1 + budget))


def _previous_text(tokenizer: Any, hotwords: str) -> list[int]:
    """`<|startofprev|>` and the words, as faster-whisper prompts its `hotwords`: a list
    that does not end a sentence is ended with a full stop, or Whisper, which writes as
    the text before it was written, ends a third of the turns it hears with a comma.

    A list longer than Whisper keeps for it is cut after the last whole name that fits
    (faster-whisper cuts its tokens, which can leave half a name for Whisper to write),
    and the names left out are logged: an operator should know which are not heard."""
    words = hotwords.strip()
    if not words:
        return []
    if not words.endswith((".", "?", "!")):
        words = words.rstrip(",;:") + "."

    def encoded(text: str) -> list[int]:
        return list(tokenizer.encode(" " + text))

    tokens = encoded(words)
    if len(tokens) <= MAX_PREVIOUS_TOKENS:
        return [tokenizer.sot_prev, *tokens]
    names = [name.strip() for name in _LIST_SEPARATOR.split(words[:-1]) if name.strip()]
    kept = 0
    while kept < len(names) and len(encoded(", ".join(names[: kept + 1]) + ".")) <= (
        MAX_PREVIOUS_TOKENS
    ):
        kept += 1
    if kept == 0:
        # Its first name alone is longer than the room (prose, not a list): its first
        # tokens, as faster-whisper would read it.
        log.warning(
            "STT_HOTWORDS' first name is longer than Whisper reads (%d tokens): only its "
            "first %d tokens are read; separate names with commas",
            MAX_PREVIOUS_TOKENS,
            MAX_PREVIOUS_TOKENS,
        )
        return [tokenizer.sot_prev, *tokens[:MAX_PREVIOUS_TOKENS]]
    left_out = names[kept:]
    shown = ", ".join(left_out[:_NAMES_LOGGED])
    more = len(left_out) - _NAMES_LOGGED
    log.warning(
        "STT_HOTWORDS is longer than Whisper reads (%d tokens): %d of %d names kept; "
        "left out: %s%s",
        MAX_PREVIOUS_TOKENS,
        kept,
        len(names),
        shown,
        f" and {more} more" if more > 0 else "",
    )
    return [tokenizer.sot_prev, *encoded(", ".join(names[:kept]) + ".")]


def _below_speech_db(audio: np.ndarray, begin_s: float, end_s: float) -> float:
    """How far the loudest 20 ms frame in [begin_s, end_s) is below the audio's speech
    (its 90th-percentile frame); an empty span is silence."""
    frame = 320
    count = audio.size // frame
    if count == 0:
        return 0.0
    power = np.mean(audio[: count * frame].reshape(count, frame).astype(np.float64) ** 2, axis=1)
    level = 10 * np.log10(power + 1e-12)
    span = level[int(begin_s * 50) : min(count, round(end_s * 50))]
    loudest = float(np.max(span)) if span.size else -120.0
    return float(np.percentile(level, 90)) - loudest


def average_logprob(score: float, length: int) -> float:
    """faster-whisper's `avg_logprob` from a CTranslate2 greedy/beam score.

    CTranslate2 returns the cumulative log-probability of the tokens *and* the end token,
    divided by `length ** length_penalty` (length: tokens without the end token; the
    penalty is 1 here). faster_whisper/transcribe.py (1.2.1,
    `WhisperModel.generate_with_fallback`) undoes that and averages over length + 1:

        cum_logprob = result.scores[0] * (seq_len**options.length_penalty)
        avg_logprob = cum_logprob / (seq_len + 1)
    """
    if length <= 0:  # nothing decoded: no tokens to average (never seen in practice)
        return 0.0
    return score * length / (length + 1)


LOOP_REPEATS = 4  # a unit said this many times running is the decoder looping
_LOOP_UNIT_WORDS = 8  # a number read out in digits loops whole, digit group and all


def collapse_loop(text: str) -> str:
    """Keep one copy of a run of 1-8 words repeated four times or more at the end of `text`.

    Greedy Whisper sometimes never stops: tiny.en heard a 0.4 s "Goodbye." as "Goodbye"
    32 times, and Piper's "Bye." as "Bye" 31 times, until the length limit cut it (often
    mid-copy, a word's tokens too); a six-digit number read out in two groups came back
    with its digits eight times. The words are right; the repetition is the decoder's.
    """
    words = text.split()
    cut = [word.strip(".,!?;:").lower() for word in words]
    # A last word the limit may have cut short: letters, with nothing after them. Not
    # digits: a number read out in groups may end in a group that begins the one before.
    short = bool(words) and words[-1].isalpha()
    for unit in range(1, _LOOP_UNIT_WORDS + 1):
        keys = cut
        if short and len(cut) > unit and cut[-1 - unit].startswith(cut[-1]):
            keys = [*cut[:-1], cut[-1 - unit]]  # the last word cut short: "Goodbye Goodb"
        # The longest tail of `keys` that repeats with this period (a cut copy included).
        start = len(keys) - unit
        while start > 0 and keys[start - 1] == keys[start - 1 + unit]:
            start -= 1
        if start >= 0 and len(keys) - start >= LOOP_REPEATS * unit:
            return " ".join(words[: start + unit]).rstrip(",;:")
    return text


class Hearing(Enum):
    """What an utterance's evidence says it held."""

    HEARD = "heard"  # words to answer: the transcript can be trusted
    UNCLEAR = "unclear"  # the caller spoke, but no reliable words came out: ask again
    NOTHING = "nothing"  # no speech (a cough, a click, noise, background talk): ignore


# Measured with `python -m benchmarks stt-evidence` (tiny.en and base, int8, 10 s window):
# 136 phone clips (11 short phrases and 3 questions; espeak-ng at 120-230 wpm in five
# voices, Piper at two rates; ten under 10 dB SNR pink noise or babble), 11 garbled
# ones (reversed or nonsense speech, speech under 0 dB babble) and 19 non-speech ones
# (silence, hiss, hum, white/pink noise, coughs, a breath, a throat-clear, clicks, a
# thump, DTMF, a tone, babble alone), each through mu-law and the call's front end.
# - The VAD heard 0 ms of speech in every non-speech clip but unprimed babble (1.1-1.5 s),
#   and at least 224 ms in every phrase (a 230 wpm "Bye."; it counts 32 ms windows).
#   Whisper wrote something on every one: "you", "I", "I'm sorry.", and "Thank you
#   very much." on a 160 ms blip of a "Bye." drowned in babble.
MIN_SPEECH_MS = 200
# - On every clip of words, no_speech_prob <= 0.66 (tiny.en; base <= 0.46). Whisper's
#   own silence rule (faster-whisper's defaults: no_speech_threshold 0.6, unless
#   avg_logprob >= log_prob_threshold -1.0) holds on tiny.en for every non-speech clip,
#   the babble the VAD passed included, and for no clip of words; its text there is an
#   invention. (On base it misses coughs, the breath, the throat-clear and DTMF, with
#   no_speech_prob 0.49-0.58: there the VAD's 0 ms is the evidence.)
SILENCE_NO_SPEECH_PROB = 0.6
SILENCE_LOGPROB = -1.0
# - Right or nearly right words scored avg_logprob >= -1.37 (tiny.en's "Yay" for "Yes"),
#   but for tiny.en's "Thanks by" (-1.55). Below -1.5 came that, wrong or broken text
#   ("5" for "Bye." in babble, reversed speech, -1.65 to -1.74) and most inventions on
#   non-speech (-1.28 to -2.62; the rules above already catch those). no_speech_prob
#   > 0.8 with words came only from non-speech and speech drowned in babble.
UNRELIABLE_NO_SPEECH_PROB = 0.8
UNRELIABLE_LOGPROB = -1.5
# - Past this much speech the VAD outweighs Whisper's silence rule: a caller talking for
#   seconds in a language or accent Whisper cannot follow (espeak French through a call:
#   3 s of speech, no_speech_prob > 0.6, avg_logprob -1.9) must be asked again, never
#   ignored. The longest non-speech the VAD passed was unprimed babble, 1.5 s.
SPEECH_OUTWEIGHS_SILENCE_MS = 2000
# - ...and past this much, when Whisper wrote words (however doubtful): in calls, tiny.en
#   gave a one-word question its silence vote at random (Piper, under echo and under
#   babble, 380-420 ms of speech, written as the word or a rhyme of it; the same word
#   in other calls scored no_speech_prob 0.40-0.55), and likewise a one-word
#   thanks before a comma under babble (420 ms). Ignored, the caller waits in
#   silence; asked again, they repeat themselves. Non-speech the VAD passes with words
#   written is unprimed babble (background talk that starts mid-call, 1.1-1.5 s, until
#   the speech gate's floor catches up): it costs one request to say it again.
#   The VAD passed no cough, breath, click, tone or hum (0 ms).
WORDS_OUTWEIGH_SILENCE_MS = 300

# - Speech Whisper cannot follow (espeak Spanish through calls and offline) also comes
#   back as a generic English sentence that says itself again, clause for clause, at
#   avg_logprob -0.87 to -1.22: Whisper's repetition loop, above UNRELIABLE_LOGPROB.
#   Callers who really repeat a phrase (a demand said twice, a greeting and a question
#   said twice on a bad line: six clips) scored -0.08 to -0.38.
REPEATED_WORDS = 4
REPETITION_LOGPROB = -0.6

# Whisper's captions for sounds, not speech: "[BLANK_AUDIO]", "(coughs)", "*sighs*", "♪".
_SOUND_CAPTION = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*|♪")
_WORD = re.compile(r"\w")


def spoken_words(text: str) -> bool:
    """Whether `text` holds any word: not only punctuation or sound captions."""
    return _WORD.search(_SOUND_CAPTION.sub(" ", text)) is not None


def repeats_itself(text: str, n: int = REPEATED_WORDS) -> bool:
    """Whether the same `n` words in a row come twice in `text`, apart (case and
    punctuation aside)."""
    words = re.findall(r"[\w']+", text.lower())
    first_seen: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        seen = first_seen.setdefault(gram, i)
        if i - seen >= n:
            return True
    return False


def assess(transcript: Transcript, *, speech_ms: int) -> Hearing:
    """Whether an utterance's transcript is what the caller said, judged on evidence.

    `speech_ms`: how much of the utterance the VAD called speech (the sum of its speech
    runs, not the utterance's length with its preroll and trailing pause).

    NOTHING: too little speech for a word, or Whisper itself finds no speech (a high
    no_speech_prob that no confident words outweigh). UNCLEAR: speech, but no words or
    words Whisper barely believes, or a doubtful sentence that repeats itself. HEARD:
    words to answer, in `transcript.text`.
    """
    if speech_ms < MIN_SPEECH_MS:
        return Hearing.NOTHING
    words = spoken_words(transcript.text)
    no_speech = transcript.no_speech_prob
    # Punctuation alone (tiny.en writes ". . ." on hiss at -0.09) vouches for no words.
    logprob = transcript.avg_logprob if words else -math.inf
    if no_speech > SILENCE_NO_SPEECH_PROB and logprob < SILENCE_LOGPROB:
        if words and speech_ms >= WORDS_OUTWEIGH_SILENCE_MS:
            return Hearing.UNCLEAR
        if speech_ms < SPEECH_OUTWEIGHS_SILENCE_MS:
            return Hearing.NOTHING
        return Hearing.UNCLEAR
    if not words or no_speech > UNRELIABLE_NO_SPEECH_PROB or logprob < UNRELIABLE_LOGPROB:
        return Hearing.UNCLEAR
    if logprob < REPETITION_LOGPROB and repeats_itself(transcript.text):
        return Hearing.UNCLEAR
    return Hearing.HEARD
