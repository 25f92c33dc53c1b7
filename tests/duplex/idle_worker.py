"""A real worker process whose backend only listens: `python -m tests.duplex.idle_worker PORT`.

The supervisor tests start, stop, kill and respawn these; the model is beside the point.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import uvicorn

from agents.duplex.backend import UnitOutcome
from agents.duplex.protocol import Prepare
from agents.duplex.worker import create_worker_app


class ListeningBackend:
    name = "listening"
    keypad_input = False

    async def load(self) -> None:
        pass

    async def prepare(self, request: Prepare) -> None:
        pass

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        return UnitOutcome()

    async def keypad(self, digits: str) -> None:
        pass

    async def finalize_unit(self) -> None:
        pass

    async def cleanup(self) -> None:
        pass

    def memory_mb(self) -> float:
        return 0.0


if __name__ == "__main__":
    port = int(sys.argv[1])
    app = create_worker_app(ListeningBackend(), worker_id=f"idle-{port}")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio")
