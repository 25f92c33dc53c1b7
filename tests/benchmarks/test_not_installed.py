"""Benchmarks stay out of the wheel: they need a source checkout, its dev dependencies
and test material, and run from it as `python -m benchmarks` (see tests/test_layering.py
for the other direction: no installed package imports them)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatchcase
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ("app", "agents", "media", "telephony", "recordings", "ops", "cli", "callevents")


def _include() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include: list[str] = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return include


def _installed(name: str) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in _include())


def test_no_installed_package_holds_a_benchmark() -> None:
    found = [
        path.relative_to(ROOT).as_posix()
        for package in INSTALLED
        for path in (ROOT / package).rglob("bench*")
        if "__pycache__" not in path.parts
    ]
    assert found == []


def test_the_installed_packages_are_the_ones_checked_here() -> None:
    for package in INSTALLED:
        assert (ROOT / package / "__init__.py").is_file() or any((ROOT / package).rglob("*.py"))
        assert _installed(package), package


def test_pyproject_does_not_install_benchmarks() -> None:
    assert not any("bench" in pattern for pattern in _include())
    for name in ("benchmarks", "benchmarks.turns", "benchmarks.__main__"):
        assert not _installed(name), name
