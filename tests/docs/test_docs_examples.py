"""Every example in the documentation runs, as the help's examples do: real subprocesses of the
installed `hipmem` (and of Python, for the API's examples), with the exit code the page says,
and the figures the page shows are the ones the command prints today.

How a page marks its examples, and how one is marked as not runnable here, is in
tests/docs_examples.py. Each example runs in a folder of its own where `samples/` and
`tests/` are the repository's, so that files it writes (plots, results, converted logs) land
there and not in the checkout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.conftest import rocm_release
from tests.docs_examples import (
    REPO,
    SHELL_LANGUAGES,
    Command,
    Example,
    all_examples,
    as_on_the_pages,
    documentation_pages,
    numbers_in,
    page_examples,
)
from tests.shared_runs import run_once
from tests.terminal import WIDTH, Seen, command_on_terminal, width_problems

EXAMPLES = all_examples()
RUNNABLE = [example for example in EXAMPLES if example.no_run_reason is None]
BIN = Path(sys.executable).parent  # the installed `hipmem` beside this Python
COLUMNS = 200  # wide enough that the pages' tables come out as they show them
_ROCM_OPTION = re.compile(r"--rocm[ =]([0-9][0-9.,]*)")


def _workdir(tmp_path: Path) -> Path:
    for name in ("samples", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def _env(home: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The environment the examples run in; `home`: HOME, XDG_CACHE_HOME or HIPMEM_CACHE_DIR
    set (a value) or unset (None) as another user's (tests/docs/test_any_home.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    for name, value in (home or {}).items():
        env.pop(name, None)
        if value is not None:
            env[name] = value
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = str(COLUMNS)
    # The pages show a machine with PyTorch 2.11 fetched, the committed snapshots' own release;
    # the tests' cache also holds the oldest and newest releases (conftest.TORCH_RELEASES).
    env["HIPMEM_TORCH"] = "2.11.0"
    return env


def _run_command(
    command: Command,
    prelude: list[str],
    workdir: Path,
    on_terminal: bool,
    home: Mapping[str, str | None] | None = None,
    shared: tuple[Path, list[str]] | None = None,
) -> list[str]:
    """What is wrong with one command's run: [] when it ran as the page says.

    A console block shows what a user sees on a terminal, so its commands write to one (a
    pseudo-terminal of 80 columns, where the output must fit); the commands of script blocks
    are piped, `COLUMNS` wide. The width rule holds for what was printed; the figures are
    compared with the page after what differs between machines (the cache folder: HOME,
    XDG_CACHE_HOME, HIPMEM_CACHE_DIR) is written as the page shows it (`as_on_the_pages`).
    `shared`: the run's shared folder and the example's commands before this one, for one run
    of a session that several pages show (tests/shared_runs.py); None: a run of its own."""
    argv = ["bash", "-c", "\n".join([*prelude, command.text])]
    where = f"line {command.line}: {command.text}"
    problems = []
    if on_terminal:  # at 80 columns, held to the width rule (tests/cli/test_fits_80_columns.py)
        env = {**_env(home), "COLUMNS": str(WIDTH)}

        def terminal_run() -> Seen:
            return command_on_terminal(argv, columns=WIDTH, env=env, cwd=workdir)

        done = run_once(*_key(shared, "terminal", command), terminal_run)
        if "--json" not in command.text and "--format json" not in command.text:
            problems += width_problems(done, f"{where} (terminal)")
    else:
        env = _env(home)
        done = run_once(*_key(shared, "piped", command), lambda: _piped(argv, workdir, env))
    if done.returncode != command.expected_exit:
        problems.append(
            f"{where}\n  exit {done.returncode}, the page says {command.expected_exit}\n"
            f"  stderr: {done.stderr.strip()[-2000:]}"
        )
    if "internal error" in done.stderr or "Traceback" in done.stderr:
        problems.append(f"{where}\n  {done.stderr.strip()[-2000:]}")
    shown = as_on_the_pages(done.stdout + done.stderr, env)
    printed = set(numbers_in(shown.splitlines()))
    stale = [n for n in numbers_in(command.shown_output) if n not in printed]
    if stale:
        problems.append(
            f"{where}\n  the page shows {', '.join(dict.fromkeys(stale))}, which it no longer "
            f"prints:\n{done.stdout}{done.stderr}"
        )
    return problems


def _key(
    shared: tuple[Path, list[str]] | None, how: str, command: Command
) -> tuple[Path | None, list[str]]:
    """`run_once`'s folder and key: how the output is shown, every command the example ran
    before (the files they left in its folder), and this one."""
    if shared is None:
        return None, []
    folder, earlier = shared
    return folder, [how, *earlier, command.text]


def _piped(argv: list[str], workdir: Path, env: dict[str, str]) -> Seen:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=workdir, env=env, timeout=300)
    return Seen(done.returncode, done.stdout, done.stderr)


def _run_shell(
    example: Example,
    workdir: Path,
    home: Mapping[str, str | None] | None = None,
    shared: Path | None = None,
) -> list[str]:
    """Every command of a shell example; `shared`: the run's folder where a session that
    several pages show is run once (never with another user's `home`)."""
    problems: list[str] = []
    prelude: list[str] = []
    earlier: list[str] = []
    for command in example.commands():
        if command.only_assigns:
            prelude.append(command.text)
        else:
            on_terminal = example.language == "console"
            sharing = None if shared is None or home is not None else (shared, list(earlier))
            problems += _run_command(command, prelude, workdir, on_terminal, home, sharing)
        earlier.append(command.text)
    return problems


def _run_python(example: Example, workdir: Path) -> list[str]:
    program = workdir / "example.py"
    program.write_text("\n".join(example.body) + "\n")
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, cwd=workdir, env=_env(),
        timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        return [f"exit {done.returncode}:\n{done.stderr.strip()[-3000:]}"]
    return []


def _releases_named(example: Example) -> set[str]:
    """The ROCm releases an example asks for (`--rocm 6.4,7.2`)."""
    text = " ".join(example.body)
    return {name for found in _ROCM_OPTION.findall(text) for name in found.split(",")}


def _uses_torch(example: Example) -> bool:
    text = " ".join(example.body)
    markers = ("-r torch", "hipmem torch", 'backend="virtual"', "--from-snapshot",
               "allocator_settings(")  # fmt: skip
    return any(marker in text for marker in markers)


def _uses_rmm(example: Example) -> bool:
    text = " ".join(example.body)
    return any(marker in text for marker in ("hipmem rmm", "fetch_rmm", "-r pool", "-r arena"))


@pytest.mark.slow
@pytest.mark.parametrize("example", RUNNABLE, ids=lambda example: example.name)
def test_example_runs_as_the_page_says(
    example: Example,
    rocm_roots: dict[str, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    shared_runs: Path,
) -> None:
    for release in sorted(_releases_named(example)):
        rocm_release(rocm_roots, release)  # a release the archive no longer has: a skip
    if _uses_torch(example):  # PyTorch's allocator for the virtual GPU, fetched once
        request.getfixturevalue("torch_allocators")
    if _uses_rmm(example):  # RMM's resources for the virtual GPU, fetched and built once
        request.getfixturevalue("rmm_releases")
    workdir = _workdir(tmp_path)
    if example.language in SHELL_LANGUAGES:
        problems = _run_shell(example, workdir, shared=shared_runs)
    else:
        problems = _run_python(example, workdir)
    assert not problems, f"{example.name}:\n" + "\n".join(problems)


def test_skipped_examples_say_why() -> None:
    for example in EXAMPLES:
        if example.no_run_reason is not None:
            assert example.no_run_reason, f"{example.name}: `no-run:` without a reason"


def test_every_shell_example_runs_hipmem() -> None:
    """A runnable shell block with no hipmem command in it checks nothing: it is context
    (mark it no-run, saying what it is) or a mistake."""
    for example in RUNNABLE:
        if example.language in SHELL_LANGUAGES:
            assert any(c.is_hipmem for c in example.commands()), example.name


def test_the_examples_are_found() -> None:
    # The pages hold dozens of examples; a parser that finds none would pass everything.
    assert len(RUNNABLE) >= 20 and {e.language for e in RUNNABLE} >= {"console", "python"}


def test_the_workload_files_shown_are_valid(tmp_path: Path) -> None:
    """A YAML block that is a workload file (`version:` and `calls:`) reads as one."""
    from hipmem.sizing.calls.workload_file import read_workload_entries

    shown = [
        block
        for page in documentation_pages()
        for block in page_examples(page, ("yaml",))
        if any(line.startswith("version:") for line in block.body)
        and any(line.startswith("calls:") for line in block.body)
    ]
    assert len(shown) >= 3
    for block in shown:
        workload = tmp_path / "workload.yaml"
        workload.write_text("\n".join(block.body) + "\n")
        assert read_workload_entries(workload), block.name
