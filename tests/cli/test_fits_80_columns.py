"""Every command's output fits 80 columns, on a terminal and piped: the commands of the
documentation's console examples (the pages' own, as tests/docs_examples.py reads them) and
every command's --help, run as a user runs them, at COLUMNS=80.

A line may be wider only when it is one word that cannot be split (a call spec, a settings
string, a path), standing alone; nothing is ever cut with "…". The one-line messages that are
one line by rule (`Error:`, `Warning:`, the `ok`/`FAIL` verdicts) and the lines written for
shells and parsers (`export X=...` and the `# ...` comment above them) are not prose and are
not wrapped.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import rocm_release
from tests.docs.test_docs_examples import _env, _releases_named, _uses_torch, _workdir
from tests.docs_examples import Command, Example, all_examples
from tests.shared_runs import run_once
from tests.terminal import (
    WIDTH,
    Seen,
    command_on_terminal,
    help_piped,
    too_wide,
    width_problems,
)

CONSOLE = [
    example
    for example in all_examples()
    if example.no_run_reason is None and example.language == "console"
]
COMMANDS = ("size", "routines", "recommend", "check", "devices", "replay", "fleet",
            "rocm", "rocm fetch", "rocm where", "log", "log inspect", "log convert",
            "torch", "torch fetch")  # fmt: skip


def _run(
    command: Command,
    prelude: list[str],
    workdir: Path,
    home: Mapping[str, str | None] | None = None,
    shared: tuple[Path, list[str]] | None = None,
) -> list[str]:
    """The width problems of one command piped at 80 columns; `home`: another user's HOME or
    cache folder (tests/docs/test_any_home.py); `shared`: the run's folder and the example's
    commands before this one, for one run of a session several pages show."""
    if "--json" in command.text or "--format json" in command.text:
        return []  # machine-readable only: JSON is read by programs, not at a width
    argv = ["bash", "-c", "\n".join([*prelude, command.text])]
    env = {**_env(home), "COLUMNS": str(WIDTH)}
    folder, earlier = shared if shared is not None else (None, [])
    piped = run_once(folder, [f"piped at {WIDTH}", *earlier, command.text],
                     lambda: _piped(argv, workdir, env))  # fmt: skip
    # On a terminal at 80 columns these commands run in tests/docs/test_docs_examples.py, which
    # holds that output to the same rule (one run of each, not two).
    return width_problems(piped, f"line {command.line}: {command.text} (piped)")


def _piped(argv: list[str], workdir: Path, env: dict[str, str]) -> Seen:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=workdir, env=env,
                          timeout=600)  # fmt: skip
    return Seen(done.returncode, done.stdout, done.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("example", CONSOLE, ids=lambda example: example.name)
def test_documented_output_fits_80_columns(
    example: Example,
    rocm_roots: dict[str, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    shared_runs: Path,
) -> None:
    for release in sorted(_releases_named(example)):
        rocm_release(rocm_roots, release)
    if _uses_torch(example):
        request.getfixturevalue("torch_allocators")
    workdir = _workdir(tmp_path)
    problems: list[str] = []
    prelude: list[str] = []
    earlier: list[str] = []  # the commands before: what they left in the folder
    for command in example.commands():
        if command.only_assigns:
            prelude.append(command.text)
        else:
            problems += _run(command, prelude, workdir, shared=(shared_runs, list(earlier)))
        earlier.append(command.text)
    assert not problems, f"{example.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_fits_80_columns_and_cuts_nothing(command: str) -> None:
    argv = [str(Path(sys.executable).parent / "hipmem"), *command.split(), "--help"]
    env = {**_env(), "COLUMNS": str(WIDTH)}
    # the piped help at 80 columns, as test_terminal_cli.py and test_cli_documented.py read it
    piped = help_piped(tuple(command.split()), columns=WIDTH)
    assert piped.returncode == 0, piped.stderr
    shown = command_on_terminal(argv, columns=WIDTH, env=env)
    assert width_problems(piped, "piped") + width_problems(shown, "terminal") == []
    # click shortens a command's description to one line with "..."; the first sentence is
    # given whole instead
    if "Commands:" in piped.stdout:
        assert "..." not in piped.stdout.split("Commands:")[1].split("Exit codes")[0]


def test_the_width_check_can_fail() -> None:
    spec = "rocsolver_dgetrf:" + ",".join(f"m{i}={i}" for i in range(20))
    assert too_wide("x " * 41) == ["x " * 41]
    assert too_wide(spec) == [] and too_wide("    " + "y" * 90) == []
    assert too_wide("Error: " + "z " * 60) == []
