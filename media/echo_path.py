"""Does the caller's line carry the bot's echo? Judged over the bot's first 2 s, and again later.

Two tests, both needed:
- coupling: how loud the line gets against the bot while it plays (the loud end of
  their level difference). A handset with no echo path couples ~-100 dB; a speakerphone
  -10 to -30 dB.
- correlation: whether the line follows the bot's audio at some delay. A loud line is
  not an echo path by itself: background talk (babble at 15 dB SNR) or a caller talking
  over the greeting couple -25 dB, and the canceller, given a line with nothing to
  cancel, holds the caller down while the bot talks and an interruption is never heard.

Measured (normalised cross-correlation peak of the pre-emphasised signals over 0-520
ms of lag, 2 s of the bot, espeak and Piper bot voices; tests/media/test_echo_path.py
has the cases): background babble 25 dB under the bot with no echo 0.035-0.049, a caller
talking over it 0.032-0.102; an echo through a band-limited reverberant path (RT60 300
ms, 250 ms away) 30 dB under the bot, 5 dB under that babble, 0.128-0.197; louder
echoes more. Speech is mostly low-frequency and voiced, so unrelated speech correlates
up to 0.15-0.37 without the pre-emphasis, and over 1 s up to 0.27 even with it. An echo
40 dB down under babble (0.05-0.09) is lost in the babble anyway.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BOT_SILENT_DB", "EchoPathTest", "correlation"]

_RATE = 8000
_SILENCE_DB = -120.0
BOT_SILENT_DB = -60.0  # a reference quieter than this plays nothing that could echo
NO_ECHO_DB = -45.0  # a line coupled to the bot less than this has no echo worth cancelling
# The line follows the bot at least this well (normalised cross-correlation).
ECHO_CORRELATION = 0.115
_BOT_SAMPLES = 2 * _RATE  # the bot playing this long before the line is judged...
# ...but a line this quiet against the bot (a handset) is judged after 1 s: until then it
# is taken for a speakerphone, whose canceller is unsettled, and an interruption of the
# greeting needs ten times the speech to stop the bot.
_QUIET_LINE_SAMPLES = _RATE
_PRE_EMPHASIS = 0.95
_MAX_DELAY = _RATE * 520 // 1000  # the longest echo path (400 ms) and the reference lead
_FRAME = 160


def _level_db(samples: np.ndarray) -> float:
    mean_square = float(np.dot(samples, samples)) / max(1, samples.size)
    return 10.0 * float(np.log10(mean_square)) if mean_square > 0.0 else _SILENCE_DB


def correlation(line: np.ndarray, reference: np.ndarray, max_delay: int = _MAX_DELAY) -> float:
    """Peak normalised cross-correlation of `line` with `reference` delayed 0-max_delay
    samples (same length, same clock), each lag over the samples both cover, of the
    pre-emphasised signals (speech's strong low end correlates with any other speech)."""
    size = min(line.size, reference.size)
    if size < 2:
        return 0.0
    line, reference = _pre_emphasised(line[:size]), _pre_emphasised(reference[:size])
    max_delay = min(max_delay, size // 2)
    n = 1 << int(np.ceil(np.log2(2 * size)))
    cross = np.fft.irfft(np.fft.rfft(line, n) * np.conj(np.fft.rfft(reference, n)), n)
    lags = np.arange(max_delay + 1)
    # At lag k: line[k:] against reference[:size - k].
    line_energy = np.cumsum((line * line)[::-1])[::-1][lags]
    ref_energy = np.cumsum(reference * reference)[size - 1 - lags]
    denominator = np.sqrt(line_energy * ref_energy)
    valid = denominator > 1e-12
    if not valid.any():
        return 0.0
    return float(np.max(np.abs(cross[lags][valid]) / denominator[valid]))


def _pre_emphasised(samples: np.ndarray) -> np.ndarray:
    x = samples.astype(np.float64)
    return np.concatenate((x[:1], x[1:] - _PRE_EMPHASIS * x[:-1]))


class EchoPathTest:
    """Fed the line and the reference (bot audio at the same samples) for each batch;
    `echo_path` is None until the bot has played 1 s (a quiet line) or 2 s, then the
    verdict.

    Only the bot's audio and its echo's tail are evidence. A caller talking over the
    bot dilutes the correlation, so a line judged to have no echo path is judged again
    over each further 2 s of the bot; one found to have an echo path keeps it (the
    canceller runs all call, so it has been learning the path meanwhile). A re-judgement
    needs two windows in a row to follow the bot: an echo follows it in every window,
    while over a long call unrelated talk now and then reads as high in one (a babble
    call's 15th window read 0.125, its others 0.015-0.049).
    """

    def __init__(self) -> None:
        self.echo_path: bool | None = None
        self._couplings: list[float] = []
        self._line: list[np.ndarray] = []
        self._reference: list[np.ndarray] = []
        self._bot_samples = 0
        self._last_followed = False  # the last window judged followed the bot

    def feed(self, line: np.ndarray, reference: np.ndarray, bot_level_db: float) -> bool | None:
        """`bot_level_db`: the bot's loudest recent level (its echo may still be coming
        back from up to ~600 ms ago)."""
        if self.echo_path or bot_level_db <= BOT_SILENT_DB:
            return self.echo_path
        self._line.append(line)
        self._reference.append(reference)
        # Per 20 ms frame: a late thread hop hands over several at once.
        for i in range(0, line.size - _FRAME + 1, _FRAME):
            self._couplings.append(_level_db(line[i : i + _FRAME]) - bot_level_db)
        self._bot_samples += line.size
        if self._bot_samples < _QUIET_LINE_SAMPLES:
            return self.echo_path
        coupling = float(np.percentile(self._couplings, 90.0)) if self._couplings else -120.0
        if coupling <= NO_ECHO_DB:
            self.echo_path = self._last_followed = False
        elif self._bot_samples >= _BOT_SAMPLES:
            followed = (
                correlation(np.concatenate(self._line), np.concatenate(self._reference))
                >= ECHO_CORRELATION
            )
            # The first judgement (echo_path None) takes one window; later ones two.
            self.echo_path = followed and (self._last_followed or self.echo_path is None)
            self._last_followed = followed
        else:
            return self.echo_path
        self._line, self._reference, self._couplings = [], [], []
        self._bot_samples = 0
        return self.echo_path
