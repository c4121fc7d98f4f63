"""The examples of the documentation (README.md and docs/*.md), read from the pages' source.

Which blocks are examples:

- a ```console block: each `$ ` line is a command (a line ending in `\\` goes on to the next),
  and the lines under it, up to the next `$ `, are the output the page shows (`...` stands for
  lines left out). `$ echo $?` after a command says its exit code: the number shown under it;
  without one, the command must exit 0;
- a ```sh (or ```bash) block: each line that is not a comment is a command, no output shown;
- a ```python block: the whole block is one program, which must exit 0.

Every command of a shell block runs, one after the other in one folder (so `$ cat out.sh`
reads what the command before it wrote), each in a shell of its own; a line that only assigns
shell variables (`$ CALLS="..."`) is kept for the commands after it in its block. A block
must run hipmem at least once.

A block that cannot run here (it needs a GPU, a file that is not in the repository, a
cluster) is marked in the page source, on the line before its fence, visibly:

    <!-- no-run: needs a GPU -->
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
SHELL_LANGUAGES = ("console", "sh", "bash", "shell")
RUN_LANGUAGES = (*SHELL_LANGUAGES, "python")

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>[\w-]*)\s*$")
_NO_RUN = re.compile(r"^\s*<!--\s*no-run:(?P<reason>.*?)-->\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass
class Command:
    text: str  # as typed, continuation lines joined
    line: int  # where it starts in the page (1-based)
    shown_output: list[str] = field(default_factory=list)
    expected_exit: int = 0

    @property
    def is_hipmem(self) -> bool:
        words = shlex.split(self.text, comments=True)
        while words and _ASSIGNMENT.match(words[0]):
            words.pop(0)
        return bool(words) and words[0] == "hipmem"

    @property
    def only_assigns(self) -> bool:
        words = shlex.split(self.text, comments=True)
        return bool(words) and all(_ASSIGNMENT.match(word) for word in words)


@dataclass
class Example:
    page: Path
    line: int  # the line of the opening fence (1-based)
    language: str
    body: list[str]
    no_run_reason: str | None

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[Command]:
        """The block's commands (shell blocks), with the output shown under each."""
        console = self.language == "console"
        found: list[Command] = []
        pending: Command | None = None
        for offset, raw in enumerate(self.body, start=self.line + 1):
            if pending is not None:  # a continuation line
                pending.text = pending.text[:-1].rstrip() + " " + raw.strip()
            elif console and raw.startswith("$ "):
                pending = Command(raw[2:].strip(), offset)
            elif console:
                if raw.strip() and found:
                    found[-1].shown_output.append(raw)
                continue
            elif raw.strip() and not raw.lstrip().startswith("#"):
                pending = Command(raw.strip(), offset)
            if pending is not None and not pending.text.endswith("\\"):
                found.append(pending)
                pending = None
        return _with_exit_codes(found)


def _with_exit_codes(commands: list[Command]) -> list[Command]:
    """Fold each `echo $?` into the command before it, as that command's exit code."""
    kept: list[Command] = []
    for command in commands:
        if command.text == "echo $?" and kept:
            code = "".join(command.shown_output).strip()
            if not code.isdigit():
                raise ValueError(f"line {command.line}: `echo $?` shows no exit code")
            kept[-1].expected_exit = int(code)
            continue
        kept.append(command)
    return kept


def page_examples(page: Path, languages: tuple[str, ...] = RUN_LANGUAGES) -> list[Example]:
    """Every fenced block of a page in one of `languages` (by default: those that run)."""
    lines = page.read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, language = opening["indent"], opening["language"]
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line
            for line in lines[index + 1 : end]
        ]
        if language in languages:
            found.append(Example(page, index + 1, language, body, _no_run_reason(lines, index)))
        index = end + 1
    return found


def _no_run_reason(lines: list[str], fence_index: int) -> str | None:
    before = fence_index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    marker = _NO_RUN.match(lines[before]) if before >= 0 else None
    return marker["reason"].strip() if marker else None


def documentation_pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def all_examples() -> list[Example]:
    return [example for page in documentation_pages() for example in page_examples(page)]


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
# A line that shows a timing (`8.5 ms`, `1,611` events/s) differs from run to run.
_TIMING = re.compile(r"\d ?(?:ns|µs|ms|s)\b|/s\b")


def numbers_in(lines: list[str]) -> list[str]:
    """The figures shown (`4,732,160`, `4.5`, `104`), but for `...` lines and timings."""
    return [
        number.rstrip(",")
        for line in lines
        if line.strip() != "..." and not _TIMING.search(line)
        for number in _NUMBER.findall(line)
    ]


# What differs between machines, written as the pages show it. The pages were run with
# HOME=/root and neither XDG_CACHE_HOME nor HIPMEM_CACHE_DIR set: their cache is this folder.
PAGES_CACHE = "/root/.cache/hipmem"


def cache_folder(env: Mapping[str, str]) -> str:
    """The cache folder hipmem uses under `env` (HIPMEM_CACHE_DIR, else XDG_CACHE_HOME's or
    HOME's), asked of hipmem's own rule (hipmem._core.cache_root)."""
    from hipmem._core.cache_root import cache_dir

    with mock.patch.dict(os.environ, dict(env), clear=True):
        return str(cache_dir())


def as_on_the_pages(text: str, env: Mapping[str, str]) -> str:
    """`text` as the pages would show it: the cache folder of `env` written as PAGES_CACHE.
    Used where printed output is compared with a page; the width rule is held on what was
    printed, unchanged (a long cache folder must fit the width there too)."""
    return text.replace(cache_folder(env), PAGES_CACHE)
