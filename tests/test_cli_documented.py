"""Every command is documented in the README and has its own help text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hipmem.cli.commands import COMMAND_MODULES

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("command", sorted(COMMAND_MODULES))
def test_command_is_in_the_readme_and_has_help(command: str) -> None:
    assert f"hipmem {command}" in README
    done = subprocess.run(
        [sys.executable, "-m", "hipmem.cli.main", command, "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Usage: hipmem" in done.stdout and command in done.stdout
