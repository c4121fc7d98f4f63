"""Progress on stderr: a bar on a terminal; piped, silence, a line per step, or a line now and
then (hipmem_cli/piped_progress.py). Libraries never draw: they take a callback, and this is it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hipmem._core.byte_sizes import format_bytes
from hipmem._core.progress import ProgressCallback, no_progress

from ..terminal_text import clean
from .consoles import console_for, wrapped


def _info(message: str) -> None:
    wrapped(message, err=True)  # as output.info says a status line


def progress_display(title: str, *, transfer: bool = False) -> Any:
    """The bar: one line at any width from 60 columns (the bar takes what is left), IEC units,
    a moving pulse instead of 0% until the first progress arrives."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.table import Column
    from rich.text import Text

    class BytesColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            done = format_bytes(int(task.completed))
            if task.total is None:
                return Text(done)
            return Text(f"{done}/{format_bytes(int(task.total))}")

    one_line = Column(no_wrap=True)
    amount: ProgressColumn = (
        BytesColumn(table_column=one_line)
        if transfer
        else MofNCompleteColumn(table_column=one_line)
    )
    return Progress(
        # The description alone may be cut at a narrow width: the bar is transient, and the
        # file or resource it names is printed whole in what follows.
        TextColumn(
            "{task.description}",
            markup=False,
            table_column=Column(no_wrap=True, overflow="ellipsis", max_width=24),
        ),
        BarColumn(bar_width=None),
        TaskProgressColumn(table_column=Column(no_wrap=True)),
        amount,
        TimeElapsedColumn(table_column=Column(no_wrap=True)),
        console=console_for("stderr"),
        transient=True,
        expand=True,
    )


@contextmanager
def progress(
    title: str,
    *,
    transfer: bool = False,
    steps_when_piped: bool = False,
    piped_every_s: float | None = None,
) -> Iterator[ProgressCallback]:
    """A progress bar on stderr when it is a terminal; a silent callback otherwise, or with
    `piped_every_s` a line now and then (hipmem_cli/piped_progress.py).

    Libraries never draw: they take a `(done, total, label)` callback, and this is it. The
    line reads `TITLE [ITEM]`: the label is shown only when it names an item (a file, a
    resource), never a second description of the work. `steps_when_piped`: for the fetches,
    whose steps (asking the package index, downloading with pip) take seconds to minutes and
    print nothing of their own: piped, each step the library names is one line
    (`fetching PyTorch 2.11: downloading PyTorch 2.11.0 (pip)`), so a CI log says what the
    wait is.
    """
    if not console_for("stderr").is_terminal:
        if steps_when_piped:
            yield _step_lines(title)
            return
        if piped_every_s is None:
            yield no_progress
            return
        from ..piped_progress import piped_progress

        with piped_progress(title, piped_every_s, _info) as lines:
            yield lines
        return
    with progress_display(title, transfer=transfer) as bar:
        task = bar.add_task(clean(title), total=None)

        def update(done: int, total: int | None, label: str = "") -> None:
            description = clean(f"{title} {label}".strip() if label else title)
            # Until something is done the bar pulses: "0%" would claim a rate it cannot know.
            shown_total = total if done > 0 else None
            bar.update(task, completed=done, total=shown_total, description=description)

        yield update


def _step_lines(title: str) -> ProgressCallback:
    """A callback that says each new step (label) once, as a line on stderr."""
    said: set[str] = set()

    def step(done: int, total: int | None, label: str = "") -> None:
        if label and label not in said:
            said.add(label)
            _info(f"{title}: {label}")

    return step
