"""The two consoles every line and table goes out through, and the state a command sets on
them (--debug, a page being kept for --html). rich is imported on first use, so that a Ctrl-C
during start-up still gets the one-line answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..table import Table
from ..terminal_text import clean, wrap

if TYPE_CHECKING:
    from rich.console import Console


@dataclass
class _State:
    debug: bool = False
    consoles: dict[str, Console] = field(default_factory=dict)
    captured: Captured | None = None  # a page (--html) keeps what is printed
    echo: bool = True  # False: kept for the page only, not printed


state = _State()


@dataclass
class Captured:
    """What a command printed on stdout while its page (--html) was made: tables and lines
    (hipmem_cli/html_output.py keeps them)."""

    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def console_for(name: str) -> Console:
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
    return console_for("stdout").is_terminal


def width() -> int:
    """Columns available on stdout (the terminal's, or $COLUMNS, or 80 when piped)."""
    return console_for("stdout").width


def print_text(text: str, *, style: str | None = None, err: bool = False) -> None:
    from rich.text import Text

    console_for("stderr" if err else "stdout").print(Text(text, style=style or ""), crop=False)


def wrapped(text: str, *, style: str | None = None, err: bool = False) -> None:
    console = console_for("stderr" if err else "stdout")
    for piece in wrap(clean(text, keep_newlines=True), console.width):
        print_text(piece, style=style, err=err)


def labelled(label: str, style: str, message: str, *, err: bool = True) -> None:
    from rich.text import Text

    text = Text(label, style=style)
    text.append(clean(message))
    console_for("stderr" if err else "stdout").print(text, crop=False)
