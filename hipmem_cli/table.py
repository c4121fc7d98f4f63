"""A table as hipmem prints it: rows of cells (plain or styled) under a title. `output/`
draws it (`print_table`) so that no cell is split inside a word."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .terminal_text import clean


class Styled(NamedTuple):
    """A table cell with a style (`red`, `bold`, `dim`, `yellow`)."""

    text: str
    style: str


Cell = str | Styled


@dataclass
class Table:
    """Rows of cells under a title. Rendered by `print_table` so that no cell is ever split
    inside a word, folded or cut: columns shrink only down to their longest word, and a table
    that still does not fit gives its last column a line of its own under each row."""

    title: str | None
    columns: Sequence[str]
    right: Sequence[str] = ()  # the columns aligned right (numbers)
    boxed: bool = True
    header: bool = True
    rows: list[list[Cell]] = field(default_factory=list)
    # A side-by-side table (one column per resource, release...) names how many leading
    # columns label its rows: too wide, it is printed in blocks of its other columns, each
    # block under those labels again, instead of giving its last column a line per row.
    label_columns: int = 0

    def add_row(self, *cells: Cell) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(list(cells))


def cell_text(cell: Cell) -> tuple[str, str]:
    if isinstance(cell, Styled):
        return clean(cell.text), cell.style
    return clean(cell), ""
