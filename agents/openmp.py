"""How long the models' OpenMP threads spin at a barrier before they sleep.

llama.cpp (the embedded LLM server and the words judge) and CTranslate2 (Whisper) run
their threads as OpenMP teams, on GNU libgomp. At each barrier a thread that is done
spins until its partners are done too: libgomp's default is 300,000 turns of the spin
loop before it sleeps. That is right for a machine the team has to itself. In a call
the models share a few cores, and a partner that has lost its core is only running again
after the spinner's time slice. A token of the LLM has hundreds of barriers, so on 2
cores a reply stopped for 3.5 s at a time and a first token came after 9 s, past
LLM_TIMEOUT_S (`python -m benchmarks llama-beside`, docs/benchmarks.md).

A short spin keeps a lone model's speed within the runs' own spread, and bounds what a
lost core costs: at 5,000 turns the longest gap beside the other models was 0.15-0.47 s.
libgomp reads GOMP_SPINCOUNT once, when it is loaded, so the bound is set before the
first model is, and every child process inherits it. An operator's own GOMP_SPINCOUNT
(or OMP_WAIT_POLICY) wins.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Final

__all__ = ["OPENMP_SPIN_COUNT", "bound_openmp_spin"]

OPENMP_SPIN_COUNT: Final = 5000


def bound_openmp_spin(environ: MutableMapping[str, str] | None = None) -> None:
    """Give `environ` (default: this process's) the short spin, unless its owner chose
    how OpenMP threads wait."""
    environ = os.environ if environ is None else environ
    if "GOMP_SPINCOUNT" in environ or "OMP_WAIT_POLICY" in environ:
        return
    environ["GOMP_SPINCOUNT"] = str(OPENMP_SPIN_COUNT)
