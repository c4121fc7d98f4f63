"""Rendering shared by every command: human byte units, errors on stderr, JSON on stdout,
and progress bars only when stderr is a terminal."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from hipmem.byte_sizes import format_bytes
from hipmem.progress import ProgressCallback, no_progress


@dataclass
class _State:
    debug: bool = False


state = _State()
stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True)


def error(message: str) -> None:
    """One line on stderr, no markup interpretation of the message."""
    stderr.print(f"[bold red]Error:[/bold red] {_escape(message)}", highlight=False)


def warning(message: str) -> None:
    stderr.print(f"[yellow]Warning:[/yellow] {_escape(message)}", highlight=False)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def print_json(payload: Any) -> None:
    """Machine-readable output only: plain JSON on stdout, no colour, no wrapping."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


# One byte formatter for the whole tool (hipmem.byte_sizes); the name the commands use.
human_bytes = format_bytes


@contextmanager
def progress(title: str, *, transfer: bool = False) -> Iterator[ProgressCallback]:
    """A progress bar on stderr when it is a terminal; a silent callback otherwise.

    Libraries never draw: they take a `(done, total, label)` callback, and this is it.
    """
    if not stderr.is_terminal:
        yield no_progress
        return
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn(), TaskProgressColumn()]
    columns += [DownloadColumn(), TransferSpeedColumn()] if transfer else [MofNCompleteColumn()]
    columns.append(TimeRemainingColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task(title, total=None)

        def update(done: int, total: int | None, label: str = "") -> None:
            description = f"{title} {label}".strip()
            bar.update(task, completed=done, total=total, description=description)

        yield update
