"""The suite leaves no scratch folders behind: they go under pytest's own temporary
folder, which pytest prunes (conftest.scratch_under_pytest_temp)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tests.services import RedisServer


def test_scratch_folders_of_the_tests_and_their_children_go_under_pytests_temp(
    scratch_under_pytest_temp: Path,
) -> None:
    scratch = scratch_under_pytest_temp
    assert Path(tempfile.mkdtemp(prefix="offhook-test-data-")).is_relative_to(scratch)
    assert RedisServer().workdir.is_relative_to(scratch)  # made, not started
    child = subprocess.run(
        [sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()).is_relative_to(scratch)
