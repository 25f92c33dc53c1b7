"""OpenMP threads spin briefly at a barrier, then sleep, unless the operator chose how
they wait: a model whose partner thread lost its core must not hold its core spinning."""

from __future__ import annotations

import pytest

from agents.cascade.llm_server import _child_environment
from agents.openmp import OPENMP_SPIN_COUNT, bound_openmp_spin


def test_an_environment_that_says_nothing_gets_the_short_spin() -> None:
    environ = {"PATH": "/usr/bin"}

    bound_openmp_spin(environ)

    assert environ == {"PATH": "/usr/bin", "GOMP_SPINCOUNT": str(OPENMP_SPIN_COUNT)}


def test_the_short_spin_is_far_below_libgomps_own() -> None:
    assert 0 < OPENMP_SPIN_COUNT <= 300_000 // 20


@pytest.mark.parametrize(
    "chosen", [{"GOMP_SPINCOUNT": "300000"}, {"OMP_WAIT_POLICY": "PASSIVE"}], ids=str
)
def test_an_operators_own_choice_is_kept(chosen: dict[str, str]) -> None:
    environ = dict(chosen)

    bound_openmp_spin(environ)

    assert environ == chosen


def test_the_embedded_llm_server_starts_with_the_short_spin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)

    assert _child_environment()["GOMP_SPINCOUNT"] == str(OPENMP_SPIN_COUNT)


def test_the_embedded_llm_server_keeps_an_operators_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOMP_SPINCOUNT", "20000")

    assert _child_environment()["GOMP_SPINCOUNT"] == "20000"
