"""The one way out to the user: every string hipmem shows passes through this module.

Three rules hold for everything printed here (tests/cli/test_output.py checks them, and that no
other module in hipmem_cli prints on its own):

- **Nothing from an input reaches the terminal raw.** Control characters (escape sequences,
  carriage returns, bells, bidi overrides) are shown as `\\x1b`-style escapes, and text is never
  read as rich markup (`[bold]`), emoji codes (`:100:`) or highlighted.
- **What users copy is never split or cut.** A call name, spec, path:line, version, or a number
  with its unit is one *word*: lines and table cells wrap only between words, a number and its
  unit stay together, nothing is elided with "…".
- **Everything fits the width** (the terminal's, or $COLUMNS, or 80 when piped), piped as on a
  terminal: prose wraps between words; a table too wide for it moves its last column (the
  call, the spec, the settings string: the long value) onto a line of its own under each row.
  Only a single word wider than the whole width runs past it, alone on its line.
- **Errors and warnings are one line** on stderr, never wrapped; `--json` is plain JSON on
  stdout.

rich is imported on first use, so that a Ctrl-C during start-up still gets the one-line answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hipmem._core.byte_sizes import format_bytes
from hipmem._core.progress import ProgressCallback, no_progress

# The text rules and the table model are pure functions and data beside this module; what
# commands use of them they reach here, through the one way out.
from .table import Cell as Cell
from .table import Styled as Styled
from .table import Table as Table
from .table import cell_text
from .terminal_text import GLUE, command_lines, glue_units, words_of, wrap
from .terminal_text import clean as clean
from .terminal_text import whole as whole

if TYPE_CHECKING:
    from rich.console import Console


@dataclass
class _State:
    debug: bool = False
    consoles: dict[str, Console] = field(default_factory=dict)
    captured: Captured | None = None  # a page (--html) keeps what is printed
    echo: bool = True  # False: kept for the page only, not printed


state = _State()

# ---------------------------------------------------------------------------------------------
# Consoles


def _console(name: str) -> Console:
    """stdout or stderr: no markup, no emoji, no highlighting, NO_COLOR respected."""
    if name not in state.consoles:
        from rich.console import Console

        state.consoles[name] = Console(
            stderr=name == "stderr",
            soft_wrap=True,
            markup=False,
            emoji=False,
            highlight=False,
        )
    return state.consoles[name]


def stdout_is_terminal() -> bool:
    return _console("stdout").is_terminal


def width() -> int:
    """Columns available on stdout (the terminal's, or $COLUMNS, or 80 when piped)."""
    return _console("stdout").width


def _print(text: str, *, style: str | None = None, err: bool = False) -> None:
    from rich.text import Text

    _console("stderr" if err else "stdout").print(Text(text, style=style or ""), crop=False)


# ---------------------------------------------------------------------------------------------
# Lines of text


def line(text: str, *, style: str | None = None, err: bool = False) -> None:
    """A line (or paragraph) of prose, wrapped between words at the width, never inside one
    (piped too: a CI log is read at 80 columns as well)."""
    if state.captured is not None and not err:
        state.captured.lines.append(text)
        if not state.echo:
            return
    _wrapped(text, style=style, err=err)


def _wrapped(text: str, *, style: str | None = None, err: bool = False) -> None:
    console = _console("stderr" if err else "stdout")
    for piece in wrap(clean(text, keep_newlines=True), console.width):
        _print(piece, style=style, err=err)


def note(text: str, *, err: bool = False) -> None:
    """A line of secondary information (dim on a terminal)."""
    line(text, style="dim", err=err)


def command(text: str, *, err: bool = False) -> None:
    """A command for the user to run next, on lines that fit the width, joined by shell
    continuations (never a wrap that would run half of it when pasted)."""
    console = _console("stderr" if err else "stdout")
    for piece in command_lines(text, console.width, "  "):
        _print(piece, style="dim", err=err)


def heading(text: str) -> None:
    line(text, style="bold")


def error(message: str) -> None:
    """`Error: message`, one line on stderr, never wrapped."""
    _labelled("Error: ", "bold red", message)


def warning(message: str) -> None:
    """`Warning: message`, one line on stderr, never wrapped."""
    _labelled("Warning: ", "yellow", message)


def skipped(described: str, consequence: str) -> None:
    """The one way every command says it skipped input it could not read: the count and the
    first places (`FILE:LINE`, `FILE#devN:ENTRY`) with why, from hipmem._core.skipped_input,
    then what it means here (`--strict makes this an error`, `accepted: --accept-skipped`)."""
    warning(f"{described} ({consequence})")


def info(message: str) -> None:
    """A progress or status message on stderr ("written to ..."), wrapped between words at
    the width as prose is: a path too long for the line goes on a line of its own, whole
    (a long HOME or cache folder makes any line that names it long)."""
    _wrapped(message, err=True)


def fail(message: str) -> None:
    """`FAIL message`: a check that did not pass, one line on stderr."""
    _labelled("FAIL ", "bold red", message)


def ok(message: str) -> None:
    """`ok message`: a check that passed, one line on stdout."""
    _labelled("ok ", "green", message, err=False)


def _labelled(label: str, style: str, message: str, *, err: bool = True) -> None:
    from rich.text import Text

    text = Text(label, style=style)
    text.append(clean(message))
    _console("stderr" if err else "stdout").print(text, crop=False)


def summarised_errors(messages: Sequence[str], *, shown: int = 5, what: str = "calls") -> None:
    """The first `shown` errors, then one line counting the rest (floods help no one)."""
    for message in messages[:shown]:
        error(message)
    if len(messages) > shown:
        error(f"{len(messages) - shown:,} more {what} failed (--json lists every one)")


def written(what: str, path: object) -> None:
    """The one wording for a file hipmem wrote: `plot written to PATH`."""
    info(f"{what} written to {path}")


def traceback_of(err: BaseException) -> None:
    """--debug: the traceback on stderr, escaped like everything else."""
    import traceback

    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    sys.stderr.write(clean(text, keep_newlines=True))
    sys.stderr.flush()


def interrupted(signum: int = signal.SIGINT) -> None:
    """Ctrl-C: one line, exit 130, whatever threads are still running; SIGTERM the same with
    "terminated", exit 143 (128 + the signal, as a shell reports it).

    Further signals are ignored, and the process ends with os._exit so that no thread join
    or finaliser can print a second message; the OS returns every byte the process held.
    """
    for ignored in STOPPING_SIGNALS:
        signal.signal(ignored, signal.SIG_IGN)
    line, code = STOPPING_SIGNALS.get(signum, STOPPING_SIGNALS[signal.SIGINT])
    with contextlib.suppress(Exception):  # stdout may be closed; the line still goes out
        sys.stdout.flush()
    try:
        os.write(2, f"Error: {line}\n".encode())
    finally:
        os._exit(code)


# The signals that stop a command cleanly (main.py unwinds, then this line and exit code).
STOPPING_SIGNALS: dict[int, tuple[str, int]] = {
    signal.SIGINT: ("interrupted", 130),
    signal.SIGTERM: ("terminated", 143),
}


def block(text: str, *, err: bool = False) -> None:
    """Preformatted text (help pages) written as is, escaped, ending in one newline."""
    stream = sys.stderr if err else sys.stdout
    stream.write(clean(text.rstrip("\n"), keep_newlines=True) + "\n")
    stream.flush()


def write_exact(text: str) -> None:
    """Text for shells and parsers (`export X=...` lines): written as is, never wrapped."""
    sys.stdout.write(clean(text, keep_newlines=True))
    sys.stdout.flush()


def replay_answer(stdout_text: str, stderr_text: str) -> None:
    """A kept answer (hipmem._core.answer_cache) written back byte for byte: it is what this
    choke point printed when the answer was made, so it is not cleaned or wrapped again."""
    sys.stdout.write(stdout_text)
    sys.stderr.write(stderr_text)
    sys.stdout.flush()
    sys.stderr.flush()


def print_json(payload: Any) -> None:
    """Machine-readable output only: plain JSON on stdout, no colour, no wrapping."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------------------------------------
# Numbers

# One byte formatter for the whole tool (hipmem._core.byte_sizes); the name the commands use.
human_bytes = format_bytes


def count(n: int) -> str:
    """Counts everywhere: thousands separated (`23,077`). Line numbers never are (`:5752`)."""
    return f"{n:,}"


# ---------------------------------------------------------------------------------------------
# Tables


@dataclass
class Captured:
    """What a command printed on stdout while its page (--html) was made: tables and lines
    (hipmem_cli/html_output.py keeps them)."""

    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


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
    console = _console("stderr" if err else "stdout")
    if table.title:
        _wrapped(table.title, err=err)  # not line(): a page shows the title with the table
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
            _print(indent + piece, style=style, err=err)


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


# ---------------------------------------------------------------------------------------------
# Progress


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
            done = human_bytes(int(task.completed))
            if task.total is None:
                return Text(done)
            return Text(f"{done}/{human_bytes(int(task.total))}")

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
        console=_console("stderr"),
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
    if not _console("stderr").is_terminal:
        if steps_when_piped:
            yield _step_lines(title)
            return
        if piped_every_s is None:
            yield no_progress
            return
        from .piped_progress import piped_progress

        with piped_progress(title, piped_every_s, info) as lines:
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
            info(f"{title}: {label}")

    return step
