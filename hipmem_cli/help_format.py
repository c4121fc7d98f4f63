"""Three adjustments to typer's plain help, made once at start-up (typer has no setting for
any):

- the list of commands gives each command's first sentence whole, wrapped under it: click
  cuts it to fit one line and ends it with "..." (`Size rocBLAS/rocSOLVER calls with the
  real libraries, on a...`), which tells a new user half of what the command does;

- an argument with a metavar shows that name alone: typer writes every argument with its
  Python type (`CALL <list[str]>`), which reads as syntax to type; options already show their
  metavar (`--plot FILE`), arguments now do too (`CALL`, `LOG`);
- `--help` pages are written through hipmem_cli/output.py like everything else.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

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
