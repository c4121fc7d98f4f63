"""`--html FILE`: one self-contained page: a timeline to zoom and hover, the tables beside it.

The page needs no network and no server: plotly's JavaScript is written into it (plotly is
the `html` extra), the rest is plain HTML and CSS. What it shows comes from the command:
the figure from replay/pictures/html_timeline.py, the tables and notes as the command printed them
(the CLI hands them over as `PageTable` and lines of text, so a new command gets a page by
handing over its own). Every text is escaped: log names and stack frames are the user's
input, never markup. Written atomically: readers see the old page or the new one.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.atomic_write import write_text_atomically

# A laptop's width: the timeline spans the page, the tables flow beside one another below it
# and scroll sideways on their own when a row is wider than the screen.
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto; padding: 0 1.2rem 2rem;
       max-width: 1600px; color: #222; }
h1 { font-size: 1.25rem; margin: 1rem 0 0.3rem; overflow-wrap: anywhere; }
.headline { margin: 0.2rem 0; font-size: 1rem; }
.headline b { color: #b00; }
.timeline { width: 100%; }
.tables { display: flex; flex-wrap: wrap; gap: 1.2rem; align-items: flex-start; }
.tables section { flex: 1 1 420px; max-width: 100%; overflow-x: auto; }
h2 { font-size: 1rem; margin: 1rem 0 0.4rem; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left;
         white-space: nowrap; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
.notes { font-size: 0.85rem; color: #444; max-width: 100ch; }
"""


@dataclass(frozen=True)
class PageTable:
    """A table as the command printed it: cells as text, the numeric columns by index."""

    title: str | None
    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    right: frozenset[int] = frozenset()


@dataclass
class Page:
    """What one page holds."""

    title: str
    headline: list[str] = field(default_factory=list)  # the peak figures, above the timeline
    figure: Any | None = None  # a plotly Figure
    tables: list[PageTable] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def write_page(path: Path, page: Page) -> None:
    """Write `page` to `path` as one HTML file, atomically."""
    write_text_atomically(path, render(page))


def render(page: Page) -> str:
    """The page's HTML text."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(page.title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(page.title)}</h1>",
        *(f'<p class="headline">{html.escape(text)}</p>' for text in page.headline),
    ]
    if page.figure is not None:
        plot = page.figure.to_html(
            full_html=False,
            include_plotlyjs=True,  # inline: the page opens with no network
            default_width="100%",
            default_height="560px",
            config={"displaylogo": False, "responsive": True, "scrollZoom": True},
        )
        parts.append(f'<div class="timeline">{plot}</div>')
    if page.tables:
        parts.append('<div class="tables">')
        parts += [_table(table) for table in page.tables]
        parts.append("</div>")
    if page.notes:
        parts.append('<div class="notes">')
        parts += [f"<p>{html.escape(text)}</p>" for text in page.notes]
        parts.append("</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _table(table: PageTable) -> str:
    rows = []
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    for row in table.rows:
        cells = "".join(
            f'<td class="num">{_cell(c)}</td>' if i in table.right else f"<td>{_cell(c)}</td>"
            for i, c in enumerate(row)
        )
        rows.append(f"<tr>{cells}</tr>")
    title = f"<h2>{html.escape(table.title)}</h2>" if table.title else ""
    body = "\n".join(rows)
    table_html = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f"<section>{title}{table_html}</section>"


def _cell(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")
