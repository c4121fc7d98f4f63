"""mypy over the package as it installs, the benchmarks and the tests (the settings are
`[tool.mypy]` in pyproject.toml). The package is read through tests/installed_view.py, built
at build/view: mypy cannot follow setuptools' editable finder, and the repository holds no
links. After one test run, `mypy` alone works too."""

from __future__ import annotations

from pathlib import Path

import mypy.api
import pytest

from tests.installed_view import build_view, real_path

REPO = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    view = build_view(REPO / "build" / "view")
    monkeypatch.chdir(REPO)
    stdout, stderr, status = mypy.api.run([])
    assert status == 0, real_path(stdout + stderr, view)
    assert "Success" in stdout
