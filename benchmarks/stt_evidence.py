"""Measure Whisper's own evidence on phone speech and on non-speech, for `stt.assess`.

    python -m benchmarks stt-evidence [--models tiny.en base] [--json out.json]

Every clip goes the way a caller's turn goes: 8 kHz int16 -> G.711 mu-law -> the call's
front end (which upsamples to 16 kHz and runs the VAD; `speech_ms` is what the VAD
called speech) -> Whisper on the turn as the agent cuts it (300 ms of preroll, the
clip, 600 ms of the pause that ends the turn). Steady backgrounds are played to the
front end for 3 s first, as a call would have, so its noise floor has settled.

Classes of clip:
  speech   short phone phrases and questions (espeak-ng at 120-230 wpm, five voices;
           Piper at two rates), clean and under 10 dB SNR pink noise or babble: HEARD;
  garbled  real speech that cannot be made out (time-reversed phrases, nonsense
           syllables, speech under louder babble): UNCLEAR is right, HEARD tolerable;
  noise    silence, hiss, hum, white/pink noise, a cough, a breath, clicks, babble
           alone: must never be HEARD as words.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ops.caller_voice import LINE_RATE, CallerVoice, phone_line
from ops.line import NoiseSource, active_rms, pink_noise

PREROLL_MS = 300
TAIL_MS = 600
PRIME_S = 3.0

SHORT = (
    "Thank you.",
    "Bye.",
    "Thanks, bye.",
    "Yes.",
    "No.",
    "Okay.",
    "Hello?",
    "Goodbye.",
    "Mhm.",
    "Yeah.",
    "Right.",
)
LONG = (
    "What time do you open on Saturday?",
    "Can I speak to someone about my bill, please?",
    "How much does the delivery cost to Boston?",
)
GIBBERISH = ("Blorf vintak sumbery.", "Ka ta mo reesh.")
# Callers who really say a phrase twice: must stay HEARD under the repetition rule.
REPEATS = (
    "I want to cancel, I want to cancel my order.",
    "Hello? Hello? Can you hear me? Can you hear me?",
    "I'm not going to be able to make it, I'm not going to be able to make it today.",
)
# A language tiny.en cannot follow: UNCLEAR is right.
FOREIGN = (
    ("es", "Hola, quisiera reservar una mesa para cuatro personas."),
    ("es", "Buenas tardes, necesito hablar con alguien sobre mi factura."),
    ("de", "Guten Tag, ich möchte einen Tisch für vier Personen reservieren."),
)
ESPEAK = (
    ("en-us", 140),
    ("en-us", 190),
    ("en-us", 230),
    ("en+f3", 165),
    ("en-gb", 165),
    ("en-us+m3", 120),
    ("en-029", 165),
)


@dataclass(frozen=True)
class Clip:
    kind: str  # speech | garbled | noise
    label: str
    pcm: np.ndarray  # int16 8 kHz: the caller's microphone, before mu-law
    background: np.ndarray | None = None  # int16 8 kHz, played to the front end first


@dataclass(frozen=True)
class Row:
    model: str
    kind: str
    label: str
    speech_ms: int
    text: str
    no_speech_prob: float
    avg_logprob: float
    audio_s: float
    stt_ms: int
    verdict: str  # stt.assess on this evidence
    verdict_if_speech: str  # ...had the VAD called 800 ms of it speech: Whisper's evidence alone


def _line(x: np.ndarray) -> np.ndarray:
    """Float 8 kHz (full scale 1.0) -> int16 through the phone's band and mu-law."""
    return phone_line(np.asarray(x, np.float32), LINE_RATE, trim=False)


def _dbfs(level: float) -> float:
    return float(10 ** (level / 20))


def _noise(seconds: float, kind: str, level_dbfs: float, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(seconds * LINE_RATE)
    unit = rng.standard_normal(n) if kind == "white" else pink_noise(n, rng)
    return (unit / np.sqrt(np.mean(unit**2)) * _dbfs(level_dbfs)).astype(np.float32)


def _burst(ms: int, level_dbfs: float, decay_ms: float, seed: int) -> np.ndarray:
    """Pink noise with a fast attack and an exponential decay: a cough or a breath."""
    n = LINE_RATE * ms // 1000
    t = np.arange(n) / LINE_RATE
    envelope = np.minimum(1.0, t / 0.008) * np.exp(-t / (decay_ms / 1000))
    unit = pink_noise(n, np.random.default_rng(seed))
    return (unit * envelope * _dbfs(level_dbfs)).astype(np.float32)


def _pad(x: np.ndarray, before_ms: int = 0, after_ms: int = 0) -> np.ndarray:
    z = np.zeros
    pre, post = z(LINE_RATE * before_ms // 1000), z(LINE_RATE * after_ms // 1000)
    return np.concatenate((pre, x, post)).astype(x.dtype)


def _mix(speech: np.ndarray, noise: NoiseSource, snr_db: float) -> tuple[np.ndarray, np.ndarray]:
    """Speech plus continuous noise at `snr_db`; and 3 s of that noise before it."""
    level = active_rms(speech) / 10 ** (snr_db / 20)
    prime = noise.take(int(PRIME_S * LINE_RATE)) * np.float32(level)
    mixed = speech.astype(np.float32) + noise.take(speech.size) * np.float32(level)
    clip = np.rint(np.clip(mixed, -32768, 32767)).astype(np.int16)
    return clip, np.rint(np.clip(prime, -32768, 32767)).astype(np.int16)


def clips() -> Iterator[Clip]:
    pink_unit = NoiseSource("pink", 1.0, seed=5)
    babble_unit = NoiseSource("babble", 1.0, seed=7)
    voices = [(f"espeak {v} {r}", CallerVoice("espeak", r, v)) for v, r in ESPEAK]
    voices += [("piper", CallerVoice("piper")), ("piper 210", CallerVoice("piper", 210))]
    for name, voice in voices:
        for text in SHORT + LONG:
            yield Clip("speech", f"{text} [{name}]", voice.speak(text))
    plain = CallerVoice("espeak", 165, "en-us")
    for text in ("Thank you.", "Bye.", "Yes.", "Okay.", LONG[0]):
        speech = plain.speak(text)
        for noise_name, unit in (("pink", pink_unit), ("babble", babble_unit)):
            clip, prime = _mix(speech, unit, 10.0)
            yield Clip("speech", f"{text} [{noise_name} 10 dB]", clip, prime)
        clip, prime = _mix(speech, babble_unit, 0.0)
        yield Clip("garbled", f"{text} [babble 0 dB]", clip, prime)
    for text in ("Thank you.", "Bye.", "Hello?", LONG[1]):
        yield Clip("garbled", f"reversed {text!r}", plain.speak(text)[::-1].copy())
    for text in GIBBERISH:
        yield Clip("garbled", f"nonsense {text!r}", plain.speak(text))
    for text in REPEATS:
        yield Clip("speech", f"{text} [espeak en-us 165]", plain.speak(text))
        yield Clip("speech", f"{text} [piper]", CallerVoice("piper").speak(text))
    for language, text in FOREIGN:
        foreign = CallerVoice("espeak", 165, language).speak(text)
        for lead_ms in (0, 7, 13):
            lead = np.zeros(lead_ms * LINE_RATE // 1000, np.int16)
            yield Clip(
                "garbled", f"{language} {text!r} +{lead_ms} ms", np.concatenate((lead, foreign))
            )

    yield Clip("noise", "digital silence 2 s", np.zeros(2 * LINE_RATE, np.int16))
    for kind, level in (("white", -60), ("white", -45), ("pink", -50), ("pink", -35)):
        steady = _line(_noise(2 + PRIME_S, kind, level))
        cut = int(PRIME_S * LINE_RATE)
        yield Clip("noise", f"{kind} noise {level} dBFS 2 s", steady[cut:], steady[:cut])
    t = np.arange(int((2 + PRIME_S) * LINE_RATE)) / LINE_RATE
    hum = 0.5 * np.sin(2 * np.pi * 60 * t) + 0.2 * np.sin(2 * np.pi * 180 * t)
    hiss = _line(hum * _dbfs(-40) + _noise(2 + PRIME_S, "white", -55))
    cut = int(PRIME_S * LINE_RATE)
    yield Clip("noise", "line hum + hiss 2 s", hiss[cut:], hiss[:cut])
    cough = np.concatenate((_burst(260, -8, 70, 1), np.zeros(1200), _burst(220, -10, 60, 2)))
    yield Clip("noise", "cough (two bursts, -8 dBFS)", _line(cough))
    yield Clip("noise", "cough (one burst, -8 dBFS)", _line(_burst(300, -8, 80, 3)))
    yield Clip("noise", "breath (-35 dBFS, 500 ms)", _line(_burst(500, -35, 250, 4)))
    clicks = np.zeros(LINE_RATE, np.float32)
    for at in (800, 4100, 6500):
        clicks[at : at + 24] = np.hanning(24) * 0.5
    yield Clip("noise", "three clicks (-6 dBFS)", _line(clicks))
    yield Clip("noise", "one click (-6 dBFS)", _line(clicks[:2000]))
    dtmf = np.zeros(LINE_RATE, np.float32)
    for k, (low, high) in enumerate(((697, 1209), (770, 1336), (852, 1477))):
        t = np.arange(int(0.1 * LINE_RATE)) / LINE_RATE
        at = int((0.1 + 0.25 * k) * LINE_RATE)
        dtmf[at : at + t.size] = 0.25 * (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t))
    yield Clip("noise", "three DTMF digits (100 ms each)", _line(dtmf))
    t = np.arange(LINE_RATE // 2) / LINE_RATE
    yield Clip("noise", "1 kHz tone 500 ms (-12 dBFS)", _line(0.25 * np.sin(2 * np.pi * 1000 * t)))
    # A throat-clear: a 110 Hz glottal buzz with noise, through one broad resonance.
    n = int(0.45 * LINE_RATE)
    t = np.arange(n) / LINE_RATE
    buzz = np.sign(np.sin(2 * np.pi * 110 * t)) * 0.3 + 0.5 * pink_noise(
        n, np.random.default_rng(8)
    )
    spectrum = np.fft.rfft(buzz)
    f = np.fft.rfftfreq(n, 1 / LINE_RATE)
    shaped = np.fft.irfft(spectrum / (1 + ((f - 500) / 300) ** 2), n=n)
    envelope = np.sin(np.pi * t / t[-1]) ** 0.5
    clear = shaped / np.max(np.abs(shaped)) * envelope * _dbfs(-8)
    yield Clip("noise", "throat clear (voiced buzz, 450 ms)", _line(clear))
    thump = np.zeros(LINE_RATE, np.float32)
    tt = np.arange(1600) / LINE_RATE
    thump[2000:3600] = np.sin(2 * np.pi * 70 * tt) * np.exp(-tt / 0.04) * 0.7
    yield Clip("noise", "thump (door, -3 dBFS)", _line(thump))
    for level in (-35, -25):
        rms = 32768 * _dbfs(level)
        steady = np.rint(NoiseSource("babble", rms, seed=11).take(int((2 + PRIME_S) * LINE_RATE)))
        pcm = steady.astype(np.int16)
        yield Clip("noise", f"babble alone {level} dBFS 2 s", pcm[cut:], pcm[:cut])
        # A babble burst the caller's VAD started on, with no background before it.
        yield Clip("noise", f"babble alone {level} dBFS 2 s, unprimed", pcm[cut:])


def front_end(clip: Clip) -> tuple[np.ndarray, int]:
    """The turn's 16 kHz audio as the agent hands it to Whisper, and the VAD's speech_ms."""
    from media.codec import mulaw_encode
    from media.frontend import FrontEnd
    from media.vad import SpeechStarted, SpeechStopped

    pre, post = LINE_RATE * PREROLL_MS // 1000, LINE_RATE * TAIL_MS // 1000
    if clip.background is None:
        lead = np.zeros(LINE_RATE, np.int16)
        turn = _pad(clip.pcm.astype(np.int16), PREROLL_MS, TAIL_MS)
    else:
        # The background goes on through the preroll and the pause that ends the turn.
        lead = clip.background
        around = np.resize(clip.background, pre + post)
        turn = np.concatenate((around[:pre], clip.pcm, around[pre:])).astype(np.int16)
    line = np.concatenate((lead, turn))
    skip = 2 * (line.size - turn.size)
    front = FrontEnd()
    audio, speech, started = [], 0, None
    for i in range(0, line.size - 159, 160):
        out = front.process(mulaw_encode(line[i : i + 160]))
        audio.append(out.audio)
        for event in out.events:
            if isinstance(event, SpeechStarted):
                started = max(event.sample, skip)
            elif isinstance(event, SpeechStopped) and started is not None:
                speech += max(0, event.sample - started)
                started = None
    if started is not None:
        speech += max(0, front.position - started)
    front.close()
    return np.concatenate(audio)[skip:], speech * 1000 // 16000


def measure(models: list[str]) -> list[Row]:
    from agents.cascade.stt import WhisperTranscriber, assess
    from app.assets import STT_ASSETS, ModelCache
    from app.settings import Settings

    settings = Settings.from_env({})
    cache = ModelCache(settings.model_cache_dir)
    stts = {m: WhisperTranscriber(cache.path(STT_ASSETS[m]), threads=2) for m in models}
    rows = []
    for clip in clips():
        audio, speech_ms = front_end(clip)
        for model, stt in stts.items():
            began = time.perf_counter()
            heard = stt.transcribe(audio)
            took = round((time.perf_counter() - began) * 1000)
            row = Row(
                model,
                clip.kind,
                clip.label,
                speech_ms,
                heard.text,
                round(heard.no_speech_prob, 3),
                round(heard.avg_logprob, 3),
                round(heard.audio_s, 2),
                took,
                assess(heard, speech_ms=speech_ms).value,
                assess(heard, speech_ms=max(speech_ms, 800)).value,
            )
            rows.append(row)
            print(json.dumps(asdict(row)), file=sys.stderr, flush=True)
    return rows


def table(rows: list[Row]) -> str:
    """One line per clip, the models side by side: text, no_speech_prob, avg_logprob, verdict.

    The verdict is assess's on the VAD's speech_ms; in brackets, where it differs, the
    verdict had the VAD called 800 ms of the clip speech (Whisper's evidence alone).
    """
    models = list(dict.fromkeys(r.model for r in rows))
    by_clip: dict[tuple[str, str], dict[str, Row]] = {}
    for r in rows:
        by_clip.setdefault((r.kind, r.label), {})[r.model] = r
    head = "| kind | clip | VAD ms | " + " | ".join(
        f"{m}: text, nsp, logprob → verdict" for m in models
    )
    lines = [head + " |", "|---|---|---:|" + "---|" * len(models)]
    for (kind, label), per_model in by_clip.items():
        cells = []
        for m in models:
            r = per_model[m]
            text = r.text if len(r.text) <= 50 else r.text[:47] + "..."
            alone = f" [{r.verdict_if_speech}]" if r.verdict_if_speech != r.verdict else ""
            cells.append(
                f"{text!r} {r.no_speech_prob:.2f} {r.avg_logprob:.2f} → {r.verdict.upper()}{alone}"
            )
        speech_ms = next(iter(per_model.values())).speech_ms
        lines.append(f"| {kind} | {label} | {speech_ms} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.provenance import options, provenance

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks stt-evidence", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"])
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--from-json", type=Path, help="tabulate rows measured before")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = json.loads(args.from_json.read_text())
        # {"provenance": ..., "rows": [...]}, or a bare list of rows (files before it).
        rows = [Row(**r) for r in (saved["rows"] if isinstance(saved, dict) else saved)]
    else:
        rows = measure(args.models)
    if args.json:
        made = provenance("stt-evidence", argv, options(args))
        written = {"provenance": made, "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(written, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
