"""A bare `mypy` on the checkout: the package as it installs (`hipmem/`, whose links lead to the
parts' folders), the benchmarks and the tests; the settings are `[tool.mypy]` in
pyproject.toml. Nothing is built first: what this runs is what `mypy` alone runs."""

from __future__ import annotations

from pathlib import Path

import mypy.api
import pytest

REPO = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    stdout, stderr, status = mypy.api.run([])
    assert status == 0, stdout + stderr
    assert "Success" in stdout
