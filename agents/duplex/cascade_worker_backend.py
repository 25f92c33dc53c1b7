"""The cascade backend as a worker process serves it: its models load after start-up."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agents.config import AgentSettings
from agents.duplex.backend import UnitOutcome
from agents.duplex.cascade_backend import CascadeDuplexBackend
from agents.duplex.process_memory import process_rss_mb
from agents.duplex.protocol import Prepare

__all__ = ["SettingsCascadeBackend"]


class SettingsCascadeBackend:
    """A cascade backend that loads its models in `load()`, for the worker's lifespan.

    The worker process is started before any model is loaded, so /health can say
    LOADING meanwhile; this wrapper defers `CascadeDuplexBackend.from_settings` to then.
    """

    name = "cascade"
    keypad_input = True

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self._inner: CascadeDuplexBackend | None = None

    @property
    def inner(self) -> CascadeDuplexBackend:
        if self._inner is None:
            raise RuntimeError("the cascade backend is used before load() finished")
        return self._inner

    async def load(self) -> None:
        self._inner = await CascadeDuplexBackend.from_settings(self.settings)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()

    async def prepare(self, request: Prepare) -> None:
        await self.inner.prepare(request)

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        return await self.inner.process_unit(audio_16k, speech)

    async def keypad(self, digits: str) -> None:
        await self.inner.keypad(digits)

    async def finalize_unit(self) -> None:
        await self.inner.finalize_unit()

    async def cleanup(self) -> None:
        if self._inner is not None:
            await self._inner.cleanup()

    def memory_mb(self) -> float:
        return process_rss_mb()
