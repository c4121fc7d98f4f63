"""Four adjustments to typer's plain help, made once at start-up (typer has no setting for
any):

- the list of commands gives each command's first sentence whole, wrapped under it: click
  cuts it to fit one line and ends it with "..." (`Size rocBLAS/rocSOLVER calls with the
  real libraries, on a...`), which tells a new user half of what the command does;

- an argument with a metavar shows that name alone: typer writes every argument with its
  Python type (`CALL <list[str]>`), which reads as syntax to type; options already show their
  metavar (`--plot FILE`), arguments now do too (`CALL`, `LOG`);
- `--help` pages are written through hipmem_cli/output/ like everything else;
- nothing a user copies is split, and no line is wider than the help: click's wrapper breaks
  words at hyphens (`--find-` / `capacity`) and cuts a word longer than the line
  (`docs/call-` / `logs.md`); here lines break only between words, and a word too long for a
  line stands on one of its own. Click writes a `\\b` block (the examples) as it is: a line
  of it wider than the help is wrapped here, an example command with a shell continuation
  (` \\`, so that it still runs when pasted), other lines under their own indent.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any

from .terminal_text import command_lines, wrapped_words

_done = False


def plain_argument_names() -> None:
    global _done
    if _done:
        return
    from typer.core import TyperArgument

    # A typer internal: where a typer release lacks it, help keeps typer's own wording rather
    # than hipmem failing to start (seen with the typer on the lent GPU machine).
    typed = getattr(TyperArgument, "display_type_rich", None)
    if typed is not None:

        def display_type(self: Any, ctx: Any) -> str | None:
            return None if self.metavar is not None else typed(self, ctx)

        TyperArgument.display_type_rich = display_type  # type: ignore[method-assign]
    _whole_short_help()
    _route_help_pages()
    _words_kept_whole()
    _done = True


def _route_help_pages() -> None:
    """The help option prints with its module's `echo`: point that at output.block."""
    import importlib

    from . import output

    try:
        decorators = importlib.import_module("typer._click.decorators")
    except ImportError:  # pragma: no cover - a typer without its own click prints as before
        return

    def echo(message: object = None, **_: object) -> None:
        output.block("" if message is None else str(message))

    decorators.__dict__["echo"] = echo  # the module global the help callback calls


def first_sentence(text: str) -> str:
    """The first sentence of a command's help, whole, on one line (no final full stop)."""
    paragraph = " ".join(inspect.cleandoc(text).split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0].removesuffix(".")


def _whole_short_help() -> None:
    from typer.core import TyperCommand, TyperGroup

    def short_help(self: Any, limit: int = 45) -> str:
        if self.short_help:
            return str(inspect.cleandoc(self.short_help)).strip()
        return first_sentence(self.help or "")

    for cls in (TyperCommand, TyperGroup):
        cls.get_short_help_str = short_help  # type: ignore[method-assign]


_LIST_ITEM = re.compile(r"^(\d+\.|[-*]) ")  # "1. ", "- ": later lines go under the text


class WholeWordsWrapper(textwrap.TextWrapper):
    """click's wrapper, breaking lines only between words: never at a hyphen, never inside a
    word (a word longer than the line gets a line of its own, whole)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.update(break_on_hyphens=False, break_long_words=False)
        super().__init__(*args, **kwargs)

    def extra_indent(self, indent: str) -> Any:  # click's own, kept
        from contextlib import contextmanager

        @contextmanager
        def indented() -> Any:
            initial, subsequent = self.initial_indent, self.subsequent_indent
            self.initial_indent += indent
            self.subsequent_indent += indent
            try:
                yield
            finally:
                self.initial_indent, self.subsequent_indent = initial, subsequent

        return indented()

    def indent_only(self, text: str) -> str:
        """A `\\b` block: each line as written, indented (`raw_block` wraps what is wider
        than the help)."""
        lines = [self.initial_indent + line for line in text.splitlines()[:1]]
        lines += [self.subsequent_indent + line for line in text.splitlines()[1:]]
        return "\n".join(raw_block(lines, self.width))


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _is_command(line: str) -> bool:
    return line.lstrip().startswith("hipmem ")


def raw_block(lines: list[str], width: int) -> list[str]:
    """The lines of a `\\b` block at `width`. Each piece is kept as written when all its
    lines fit, else wrapped between words: an example command (`hipmem ...` and the lines its
    shell continuations carry on to) with a continuation at the end of each line, the rest
    indented 4 more and an option kept with its value (`-r pool`); a paragraph at the block's
    indent (with the lines after it at that indent) or a list item (`1. `, with the lines under
    its text) under its own indent; any other line (a spec of a list) on its own."""
    shown: list[str] = []
    base = _indent_of(lines[0]) if lines else ""
    index = 0
    while index < len(lines):
        line, end = lines[index], index + 1
        indent = _indent_of(line)
        item = _LIST_ITEM.match(line.lstrip())
        if _is_command(line):
            while end < len(lines) and lines[end - 1].rstrip().endswith("\\"):
                end += 1
            hanging = indent + "    "
        elif item or indent == base:
            hanging = indent + " " * len(item.group(0)) if item else indent
            while end < len(lines) and _continues(lines[end], hanging):
                end += 1
        else:
            hanging = indent + "  "
        piece = lines[index:end]
        if max(len(one) for one in piece) <= width:
            shown += piece
        elif _is_command(line):
            shown += command_lines(" ".join(one.strip() for one in piece), width, indent)
        else:
            shown += wrapped_words(" ".join(piece).split(), width, indent, hanging)
        index = end
    return shown


def _continues(line: str, hanging: str) -> bool:
    """Whether `line` carries on the paragraph whose later lines start at `hanging`."""
    text = line.lstrip()
    return (
        bool(text)
        and _indent_of(line) == hanging
        and not (_is_command(line) or _LIST_ITEM.match(text))
    )


def write_dl(self: Any, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
    """click's definition list (options, arguments, commands), except that a description
    holding a word wider than its column (a path, a spec) goes under its term, 4 columns in,
    where the word fits; click would write the word past the width."""
    rows = list(rows)
    col_max = min(col_max, (self.width - 2) * 2 // 5)  # the terms take 2/5 of a narrow line
    first_col = min(max((len(term) for term, _ in rows), default=0), col_max) + col_spacing
    text_width = max(self.width - first_col - 2, 10)
    margin = " " * self.current_indent
    for term, text in rows:
        if not text:
            self.write(f"{margin}{term}\n")
            continue
        if max(len(word) for word in text.split()) > text_width:
            under = margin + " " * 4
            self.write(f"{margin}{term}\n")
            self.write("\n".join(wrapped_words(text.split(), self.width, under, under)) + "\n")
            continue
        lines = wrapped_words(text.split(), text_width, "", "")
        if len(term) <= first_col - col_spacing:
            self.write(f"{margin}{term}{' ' * (first_col - len(term))}{lines[0]}\n")
        else:
            self.write(f"{margin}{term}\n{margin}{' ' * first_col}{lines[0]}\n")
        for line in lines[1:]:
            self.write(f"{margin}{' ' * first_col}{line}\n")


def _words_kept_whole() -> None:
    """click's wrapper replaced by WholeWordsWrapper where click looks it up on each call
    (`from ._textwrap import TextWrapper` inside `wrap_text`), and its definition lists
    written by `write_dl`."""
    import importlib

    for name in ("typer._click", "click"):
        try:
            wrapping = importlib.import_module(f"{name}._textwrap")
            formatting = importlib.import_module(f"{name}.formatting")
        except ImportError:  # pragma: no cover - the click that this typer does not use
            continue
        wrapping.__dict__["TextWrapper"] = WholeWordsWrapper
        formatting.HelpFormatter.write_dl = write_dl
