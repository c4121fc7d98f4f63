"""The one way out to the user: every string hipmem shows passes through this package.

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
from collections.abc import Sequence
from typing import Any

from hipmem._core.byte_sizes import format_bytes

# The text rules and the table model are pure functions and data beside this package; what
# commands use of them they reach here, through the one way out.
from ..table import Cell as Cell
from ..table import Styled as Styled
from ..table import Table as Table
from ..terminal_text import clean as clean
from ..terminal_text import command_lines
from ..terminal_text import whole as whole
from .consoles import Captured as Captured
from .consoles import console_for, labelled, print_text, wrapped
from .consoles import state as state
from .consoles import stdout_is_terminal as stdout_is_terminal
from .consoles import width as width
from .progress import progress as progress
from .progress import progress_display as progress_display
from .tables import cell_len as cell_len
from .tables import column_widths as column_widths
from .tables import print_table as print_table

# ---------------------------------------------------------------------------------------------
# Lines of text


def line(text: str, *, style: str | None = None, err: bool = False) -> None:
    """A line (or paragraph) of prose, wrapped between words at the width, never inside one
    (piped too: a CI log is read at 80 columns as well)."""
    if state.captured is not None and not err:
        state.captured.lines.append(text)
        if not state.echo:
            return
    wrapped(text, style=style, err=err)


def note(text: str, *, err: bool = False) -> None:
    """A line of secondary information (dim on a terminal)."""
    line(text, style="dim", err=err)


def command(text: str, *, err: bool = False) -> None:
    """A command for the user to run next, on lines that fit the width, joined by shell
    continuations (never a wrap that would run half of it when pasted)."""
    console = console_for("stderr" if err else "stdout")
    for piece in command_lines(text, console.width, "  "):
        print_text(piece, style="dim", err=err)


def heading(text: str) -> None:
    line(text, style="bold")


def error(message: str) -> None:
    """`Error: message`, one line on stderr, never wrapped."""
    labelled("Error: ", "bold red", message)


def warning(message: str) -> None:
    """`Warning: message`, one line on stderr, never wrapped."""
    labelled("Warning: ", "yellow", message)


def skipped(described: str, consequence: str) -> None:
    """The one way every command says it skipped input it could not read: the count and the
    first places (`FILE:LINE`, `FILE#devN:ENTRY`) with why, from hipmem._core.skipped_input,
    then what it means here (`--strict makes this an error`, `accepted: --accept-skipped`)."""
    warning(f"{described} ({consequence})")


def info(message: str) -> None:
    """A progress or status message on stderr ("written to ..."), wrapped between words at
    the width as prose is: a path too long for the line goes on a line of its own, whole
    (a long HOME or cache folder makes any line that names it long)."""
    wrapped(message, err=True)


def fail(message: str) -> None:
    """`FAIL message`: a check that did not pass, one line on stderr."""
    labelled("FAIL ", "bold red", message)


def ok(message: str) -> None:
    """`ok message`: a check that passed, one line on stdout."""
    labelled("ok ", "green", message, err=False)


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
