"""Shared fixtures for media tests: espeak-ng speech sent through an 8 kHz mu-law line."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from media.wav import read_wav
from tests.media.helpers import phone_line


@pytest.fixture(scope="session")
def speak(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], np.ndarray]:
    """speak(text) -> espeak-ng speech at 8 kHz as heard through a phone line."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    folder = tmp_path_factory.mktemp("espeak")
    cache: dict[str, np.ndarray] = {}

    def _speak(text: str) -> np.ndarray:
        if text not in cache:
            path = Path(folder) / f"{len(cache)}.wav"
            subprocess.run(["espeak-ng", "-w", str(path), text], check=True)
            samples, rate = read_wav(path)
            cache[text] = phone_line(samples, rate)
        return cache[text].copy()

    return _speak
