"""Tables drawn at the width: boxed when they fit, in blocks of compared columns, or with the
last column (the long value users copy) on a line of its own under each row."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..table import Table, cell_text
from ..terminal_text import GLUE, clean, glue_units, words_of, wrap
from .consoles import console_for, print_text, state, wrapped

if TYPE_CHECKING:
    from rich.console import Console


def column_widths(table: Table, available: int, overhead: int) -> list[int]:
    """Each column's width: its natural width if the table fits `available` columns, else
    shrunk towards its longest word (never below), widest columns first. A table that cannot
    fit even then keeps its natural widths: it runs past the width, one line per row."""
    cells = [[cell_text(c)[0] for c in row] for row in table.rows]
    headers = [clean(h) for h in table.columns] if table.header else ["" for _ in table.columns]
    natural, least = [], []
    for index, head in enumerate(headers):
        texts = [head] + [row[index] for row in cells]
        natural.append(max((cell_len(line) for t in texts for line in t.split("\n")), default=1))
        least.append(max((cell_len(w) for t in texts for w in words_of(t)), default=1))
    widths = [max(n, 1) for n in natural]
    if sum(least) + overhead > available:
        return widths  # it runs past the width anyway: one line per row reads best
    excess = sum(widths) + overhead - available
    while excess > 0:
        shrinkable = [i for i, w in enumerate(widths) if w > least[i]]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: widths[i])
        widths[widest] -= 1
        excess -= 1
    return widths


def cell_len(text: str) -> int:
    """Columns `text` takes on a terminal (wide characters take two)."""
    from rich.cells import cell_len as columns

    return columns(text)


def print_table(table: Table, *, err: bool = False) -> None:
    """The title on its own line (as `line`), then the table.

    A table that fits the width, its columns shrunk at most to their longest word, is drawn
    as it is. One that does not is drawn without its last column, and each row's last cell
    follows that row on a line of its own, indented: the long values (call names, specs,
    settings) stay whole on one line each, and the table fits.
    """
    if state.captured is not None and not err:
        state.captured.tables.append(table)
        if not state.echo:
            return
    console = console_for("stderr" if err else "stdout")
    if table.title:
        wrapped(table.title, err=err)  # not line(): a page shows the title with the table
    _draw(console, table, err=err)


def _draw(console: Console, table: Table, *, err: bool) -> None:
    """The table at the console's width: boxed when it fits, else in blocks or stacked."""
    widths, overhead = _fitted(console, table)
    if sum(widths) + overhead <= console.width or len(table.columns) < 2:
        rich_table = _rich_table(table, widths, boxed=table.boxed)
        _print_lines(console, rich_table, max(console.width, sum(widths) + overhead))
        return
    if 0 < table.label_columns < len(table.columns) - 1:
        for block in _blocks(console, table):
            _draw(console, block, err=err)
        return
    _print_stacked(console, table, err=err)


def _blocks(console: Console, table: Table) -> list[Table]:
    """A side-by-side table cut into tables of as many of its compared columns as fit, each
    with the label columns first (at least one compared column each)."""
    labels = list(range(table.label_columns))
    blocks: list[list[int]] = [[]]
    for index in range(table.label_columns, len(table.columns)):
        trial = _columns_of(table, [*labels, *blocks[-1], index])
        widths, overhead = _fitted(console, trial)
        if blocks[-1] and sum(widths) + overhead > console.width:
            blocks.append([])
        blocks[-1].append(index)
    return [_columns_of(table, [*labels, *block]) for block in blocks]


def _columns_of(table: Table, indices: list[int]) -> Table:
    columns = [table.columns[i] for i in indices]
    rows = [[row[i] for i in indices] for row in table.rows]
    right = [name for name in table.right if name in columns]
    return Table(None, columns, right, table.boxed, table.header, rows)


def _fitted(console: Console, table: Table) -> tuple[list[int], int]:
    """The columns' widths at this width, and what the table adds around them."""
    overhead = _measure(console, _rich_table(table, [1] * len(table.columns), boxed=table.boxed))
    overhead -= len(table.columns)
    return column_widths(table, console.width, overhead), overhead


_STACK_INDENT = "    "


def _print_stacked(console: Console, table: Table, *, err: bool) -> None:
    """The table without its last column; each row's last cell on the line under the row."""
    shown = Table(None, table.columns[:-1], table.right, table.boxed, table.header,
                  [row[:-1] for row in table.rows])  # fmt: skip
    widths, overhead = _fitted(console, shown)
    width = sum(widths) + overhead  # the rule under the header as wide as the rows, no wider
    if table.header:
        _print_lines(console, _rich_table(shown, widths, boxed=False, rows=False), width)
    for full, row in zip(table.rows, shown.rows, strict=True):
        one = Table(None, shown.columns, shown.right, shown.boxed, False, [row])
        _print_lines(console, _rich_table(one, widths, boxed=False), width)
        text, style = cell_text(full[-1])
        if not text.strip():
            continue  # an empty cell adds no line
        for piece in wrap(text, console.width - len(_STACK_INDENT)):
            # A word wider than the indented line (a long spec) stands alone, unindented.
            indent = _STACK_INDENT if len(_STACK_INDENT + piece) <= console.width else ""
            print_text(indent + piece, style=style, err=err)


def _rich_table(table: Table, widths: list[int], *, boxed: bool, rows: bool = True) -> Any:
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    rich_table = RichTable(
        box=box.HEAVY_HEAD if boxed else box.SIMPLE_HEAD,
        show_header=table.header,
        show_edge=boxed,
        pad_edge=boxed,
        expand=False,
    )
    if not table.boxed:
        rich_table.box = None
    for index, head in enumerate(table.columns):
        rich_table.add_column(
            Text(glue_units(clean(head)), style="bold"),
            justify="right" if head in table.right else "left",
            width=widths[index],
            overflow="fold",  # never reached: each column is at least its longest word wide
        )
    for row in table.rows if rows else []:
        cells = [Text(glue_units(text), style=style) for text, style in map(cell_text, row)]
        rich_table.add_row(*cells)
    return rich_table


def _measure(console: Console, renderable: Any) -> int:
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(1 << 16), renderable).maximum


def _print_lines(console: Console, renderable: Any, width: int) -> None:
    """Render at `width` (which may exceed the console's), and print each line whole, with
    its trailing padding removed and the unit glue turned back into spaces."""
    from rich.segment import Segment, Segments

    options = console.options.update_width(width)
    out: list[Segment] = []
    for segments in Segment.split_lines(console.render(renderable, options)):
        while segments and not segments[-1].control and not segments[-1].text.rstrip():
            segments.pop()
        drawn = "".join(s.text for s in segments)
        if drawn.strip() and set(drawn) <= set("─━ "):  # a rule line: to the width only
            segments = [Segment("─" * min(width, console.width), segments[0].style)]
        if segments:
            last = segments[-1]
            segments[-1] = Segment(last.text.rstrip(), last.style, last.control)
        out += [Segment(s.text.replace(GLUE, " "), s.style, s.control) for s in segments]
        out.append(Segment.line())
    console.print(Segments(out), crop=False, soft_wrap=True, end="")
