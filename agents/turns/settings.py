"""The turn-taking settings every agent reads, from whatever settings object it has."""

from __future__ import annotations

from typing import Protocol

from agents.turns.config import TurnTaking, fused_weights

__all__ = ["TurnSettings", "turn_taking"]


class TurnSettings(Protocol):
    """What `turn_taking` reads (the app's Settings has all of it)."""

    @property
    def end_of_turn_threshold(self) -> float: ...

    @property
    def end_of_turn_min_silence_ms(self) -> int: ...

    @property
    def end_of_turn_max_silence_ms(self) -> int: ...

    @property
    def barge_in_min_speech_ms(self) -> int: ...

    @property
    def echo_margin_db(self) -> float: ...

    @property
    def hold_duck_db(self) -> float: ...

    @property
    def hold_lowered_ms(self) -> int: ...

    @property
    def hold_quiet_lowers_ms(self) -> int: ...

    @property
    def turn_judge_weights(self) -> str: ...


def turn_taking(settings: TurnSettings) -> TurnTaking:
    """One mapping from settings to the engine's config, for the in-process cascade and
    the duplex `cascade` backend alike."""
    return TurnTaking(
        end_of_turn_threshold=settings.end_of_turn_threshold,
        min_silence_ms=settings.end_of_turn_min_silence_ms,
        max_silence_ms=settings.end_of_turn_max_silence_ms,
        barge_in_min_speech_ms=settings.barge_in_min_speech_ms,
        echo_margin_db=settings.echo_margin_db,
        hold_duck_db=settings.hold_duck_db,
        lowered_hold_ms=settings.hold_lowered_ms,
        lowered_again_quiet_ms=settings.hold_quiet_lowers_ms,
        fused=fused_weights(settings.turn_judge_weights),
    )
