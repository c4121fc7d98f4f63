"""Every command is documented: its `--help` ends with the page of docs/ that documents it, as
`hipmem docs` names it (`Docs: hipmem docs <page>`, the page docs/<page>.md: an install
carries the pages), and that page exists and names the command. The commands are read from the
CLI itself, so a new command or subcommand is checked without being listed here."""

from __future__ import annotations

import functools
import re
import subprocess
from typing import Any

import pytest
import typer

from hipmem.cli.main import build_app
from tests.terminal import HIPMEM, REPO, help_piped

DOCS_LINE = re.compile(r"Docs: hipmem docs ([\w-]+)")


def command_paths() -> list[list[str]]:
    """Every command and command group of `hipmem`, the top level included ([])."""
    found: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        found.append(path)
        # A group has subcommands (typer may bring a click of its own: no isinstance check).
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(build_app([])), [])
    return found


COMMANDS = command_paths()


def test_every_command_is_found() -> None:
    # A walk that found nothing would check nothing.
    names = {" ".join(path) for path in COMMANDS}
    assert {"size", "rocm fetch", "log inspect", "log convert", "fleet", "check"} <= names


@functools.cache
def _hipmem_docs(page: str) -> subprocess.CompletedProcess[str]:
    """`hipmem docs PAGE`, run once per page (a command group and its subcommands share one)."""
    return subprocess.run(
        [str(HIPMEM), "docs", page], capture_output=True, text=True, cwd=REPO, timeout=60
    )


@pytest.mark.parametrize("path", COMMANDS, ids=lambda path: " ".join(path) or "hipmem")
def test_help_ends_with_its_docs_page_which_documents_it(path: list[str]) -> None:
    done = help_piped(tuple(path))  # the help as test_fits_80_columns.py reads it: one run
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: hipmem")
    last = done.stdout.strip().splitlines()[-1].strip()
    docs = DOCS_LINE.fullmatch(last)
    command = " ".join(["hipmem", *path])
    assert docs, f"`{command} --help` ends with {last!r}, not `Docs: hipmem docs PAGE`"
    page = REPO / "docs" / f"{docs[1]}.md"
    assert page.is_file(), f"{page} does not exist"
    assert " ".join(["hipmem", *path]) in page.read_text(), f"{page} never names the command"
    shown = _hipmem_docs(docs[1])
    assert (shown.returncode, shown.stdout.strip()) == (0, str(page))


def test_the_readme_keeps_one_example_per_job() -> None:
    """The README is for users: under 400 lines, an example for each job, the rest in docs/."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 400
    sections = dict(re.findall(r"^## ([^\n]+)\n(.*?)(?=^## |\Z)", readme, flags=re.M | re.S))
    for job in ("Size", "Recommend", "Replay", "Snapshots", "Fleets", "Virtual GPUs"):
        assert "```console\n$ hipmem" in sections.get(job, ""), f"README: no example under {job}"
