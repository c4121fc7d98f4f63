"""`--html FILE` for any command: what it printed, handed to the page with its timeline.

A command that offers `--html` checks the path first (`check_html_option`), runs inside
`captured()` so that its tables and lines are kept as it prints them, then calls
`write_html` with its figure (replay/pictures/html_timeline.py). A new command (`explain`) gets a
page the same way: nothing here knows which command it serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..replay.pictures.html_page import Page, PageTable, write_page
from . import output


def check_html_option(path: Path | None) -> None:
    """Refuse a --html FILE that cannot be written (or plotly missing) before any work."""
    if path is not None:
        from hipmem._core.html_files import check_html_path

        check_html_path(path)


@contextmanager
def captured(*, echo: bool = True) -> Iterator[output.Captured]:
    """Keep the tables and lines printed inside, for the page; with `echo` False they are
    kept and not printed (a table shown only on a terminal, wanted on the page anyway)."""
    state = output.state
    before = state.captured, state.echo
    state.captured = before[0] or output.Captured()
    state.echo = before[1] and echo
    try:
        yield state.captured
    finally:
        state.captured, state.echo = before


def page_table(table: output.Table) -> PageTable:
    """A printed table as the page shows it (the same cells, as text)."""
    right = frozenset(i for i, name in enumerate(table.columns) if name in table.right)
    rows = [[c.text if isinstance(c, output.Styled) else c for c in row] for row in table.rows]
    columns = list(table.columns) if table.header else ["" for _ in table.columns]
    return PageTable(table.title, columns, rows, right)


def write_html(
    path: Path,
    title: str,
    captured: output.Captured,
    *,
    figure: Any | None = None,
    headline: list[str] | None = None,
    tables: list[PageTable | None] | None = None,
    notes: list[str | None] | None = None,
) -> None:
    """Write the page: headline, figure, then the captured tables and lines, and the
    command's own `tables` and `notes` for the page (None items are left out)."""
    page = Page(
        title=title,
        headline=headline or [],
        figure=figure,
        tables=[page_table(t) for t in captured.tables] + [t for t in tables or [] if t],
        notes=list(captured.lines) + [n for n in notes or [] if n],
    )
    write_page(path, page)
    output.written("page", path)
