"""`python -m benchmarks held-words` — short words over the bot: go on, or stop?

    python -m benchmarks held-words [--items 400] [--seed N] [--json out.json]

When a caller's speech over the bot holds it, the engine judges the words once Whisper
has them: a listener's noise lets the bot go on, words that take the turn stop it
(agents/turns/overlap.py, `lets_the_bot_go_on`). This measures that judgement on
material made fresh for each run: half the items are backchannels (the closed class
`bench turns` says over replies), half are short caller lines (at most four words) from
chatterbot-corpus, which nobody here wrote. Each is said in a random espeak-ng voice and
rate, or by Piper (a third), over 8 kHz mu-law, with a call's silence around it, and
heard by Whisper and judged as the engine hears a held overlap.

Two errors count: a backchannel that stops the bot (it drops its reply, and answers a
hum), and short words that let it go on (it talks on over a caller). Beside the
product's rule, two rules without the word list of turn-taking words are scored: only
the closed class of backchannels goes on, and that or words the words judge finds
unfinished (a fragment Whisper made of a hum). Items fall into a tuning and a held-out
half by voice and rate; quote the held-out half.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from agents.turns.config import TurnTaking
from agents.turns.judge import FusedJudge
from agents.turns.overlap import lets_the_bot_go_on
from agents.turns.protocol import Evaluation, Hearing
from agents.turns.text import is_backchannel
from benchmarks.judge_material import (
    ESPEAK_VARIANTS,
    ESPEAK_VOICES,
    corpus_pairs,
    pool_of,
    to_16k,
)
from benchmarks.provenance import add_seed_and_json, fresh_seed, write_result
from benchmarks.turns.corpus import BACKCHANNELS

__all__ = ["Heard", "main"]

RATE = 8000
SHORT_WORDS = 4  # the most words a caller line may have to count as short
PIPER_SHARE = 1 / 3
BEFORE_MS, AFTER_MS = 200, 300  # the call's quiet around the words, as the engine has it


@dataclass(frozen=True)
class Heard:
    """One item: what was said, by whom, and what the models made of it."""

    kind: str  # "backchannel" or "words"
    said: str
    voice: str
    rate_wpm: int
    half: str
    speech_ms: int
    text: str
    hearing: str
    no_speech_prob: float
    avg_logprob: float
    words: float | None  # the words judge's P(complete), with a bot line before


def _short_lines() -> list[tuple[str, str]]:
    """(bot line, caller line) pairs whose caller line is short."""
    return [
        (bot, caller.strip())
        for bot, caller in corpus_pairs()
        if 1 <= len(caller.split()) <= SHORT_WORDS
    ]


def observe(count: int, seed: int) -> list[Heard]:
    from agents.assets import STT_ASSETS, ModelCache
    from agents.cascade.stt import WhisperTranscriber
    from agents.cascade.turn_evaluator import heard_as
    from agents.cascade.words_judge import LlamaWordsJudge
    from app.settings import Settings
    from ops.caller_voice import CallerVoice, CallerVoiceError

    cache = ModelCache(Settings.from_env().model_cache_dir)
    stt = WhisperTranscriber(cache.path(STT_ASSETS["tiny.en"]), threads=2)
    judge = LlamaWordsJudge(cache.path("smollm2-135m-instruct"), threads=2)
    piper = CallerVoice("piper", 165)
    rng = np.random.default_rng(seed)
    lines = _short_lines()
    bot_lines = [bot for bot, _ in corpus_pairs()]
    found: list[Heard] = []
    for index in range(count):
        if index % 2 == 0:
            kind, said = "backchannel", str(rng.choice(BACKCHANNELS))
            bot = str(rng.choice(bot_lines))
        else:
            kind = "words"
            bot, said = lines[int(rng.integers(len(lines)))]
        rate = int(rng.integers(120, 211))
        if rng.random() < PIPER_SHARE:
            voice_name, voice = "piper", piper
            voice.rate_wpm = rate
        else:
            voice_name = str(rng.choice(ESPEAK_VOICES)) + str(rng.choice(ESPEAK_VARIANTS))
            voice = CallerVoice("espeak", rate, voice_name)
        try:
            speech = voice.speak(said)
        except CallerVoiceError:
            continue
        speech_ms = speech.size * 1000 // RATE
        quiet = [np.zeros(ms * RATE // 1000, np.int16) for ms in (BEFORE_MS, AFTER_MS)]
        transcript = stt.transcribe(to_16k(np.concatenate([quiet[0], speech, quiet[1]])))
        hearing = heard_as(transcript, speech_ms)
        words = judge.complete(bot, transcript.text) if hearing is Hearing.HEARD else None
        found.append(
            Heard(
                kind=kind,
                said=said,
                voice=voice_name,
                rate_wpm=rate,
                # Voice and rate together: Piper's one voice falls in both halves.
                half=pool_of(f"{voice_name} {rate // 10}"),
                speech_ms=speech_ms,
                text=transcript.text.strip(),
                hearing=hearing.value,
                no_speech_prob=transcript.no_speech_prob,
                avg_logprob=transcript.avg_logprob,
                words=words,
            )
        )
    return found


def _evaluation(item: Heard) -> Evaluation:
    return Evaluation(
        end=0,
        probability=None,
        text=item.text,
        hearing=Hearing(item.hearing),
        no_speech_prob=item.no_speech_prob,
        avg_logprob=item.avg_logprob,
        words=item.words,
    )


def rules(cfg: TurnTaking) -> dict[str, Callable[[Heard], bool]]:
    """Whether the bot goes on, by each rule scored."""
    fused = FusedJudge(cfg)

    def product(item: Heard) -> bool:
        return lets_the_bot_go_on(_evaluation(item), item.speech_ms, cfg)

    def closed_class(item: Heard) -> bool:
        if item.hearing != Hearing.HEARD.value:
            return True
        return is_backchannel(item.text) and item.speech_ms <= cfg.backchannel_max_ms

    def closed_class_or_fragment(item: Heard) -> bool:
        if closed_class(item):
            return True
        if item.speech_ms > cfg.backchannel_max_ms or item.text.endswith("?"):
            return False
        return not fused.answerable(_evaluation(item))

    return {
        "product (word list)": product,
        "closed class only": closed_class,
        "closed class or fragment": closed_class_or_fragment,
    }


def score(items: list[Heard], cfg: TurnTaking) -> dict[str, dict[str, dict[str, int]]]:
    """Per half and rule: backchannels that stop the bot, short words it goes on over."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for half in ("tuning", "held-out"):
        mine = [item for item in items if item.half == half]
        backchannels = [item for item in mine if item.kind == "backchannel"]
        words = [item for item in mine if item.kind == "words"]
        out[half] = {
            name: {
                "backchannels": len(backchannels),
                "backchannels_stopping": sum(not goes_on(item) for item in backchannels),
                "words": len(words),
                "words_talked_over": sum(goes_on(item) for item in words),
            }
            for name, goes_on in rules(cfg).items()
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks held-words", description=__doc__)
    parser.add_argument("--items", type=int, default=400, help="items said (default 400)")
    add_seed_and_json(parser)
    args = parser.parse_args(argv)
    seed = fresh_seed(args.seed)
    print(f"seed {seed}: {args.items} items", file=sys.stderr)
    items = observe(args.items, seed)
    figures = score(items, TurnTaking())
    print("| half | rule | backchannels that stop the bot | short words it talks over |")
    print("|---|---|---|---|")
    for half, by_rule in figures.items():
        for name, f in by_rule.items():
            print(
                f"| {half} | {name} | {f['backchannels_stopping']}/{f['backchannels']} "
                f"| {f['words_talked_over']}/{f['words']} |"
            )
    if args.json is not None:
        result = {"seed": seed, "figures": figures, "items": [asdict(i) for i in items]}
        write_result(args.json, "held-words", argv, {"seed": seed}, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
