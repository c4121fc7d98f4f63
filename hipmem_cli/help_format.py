"""One adjustment to typer's plain help: an argument with a metavar shows that name alone.

typer writes every argument with its Python type (`CALL <list[str]>`), which reads as
syntax to type. Options already show their metavar (`--plot FILE`); arguments now do too
(`CALL`, `LOG`). typer has no setting for this, so the one method is replaced here, once.
"""

from __future__ import annotations

from typing import Any

_done = False


def plain_argument_names() -> None:
    global _done
    if _done:
        return
    from typer.core import TyperArgument

    typed = TyperArgument.display_type_rich

    def display_type(self: Any, ctx: Any) -> str | None:
        return None if self.metavar is not None else typed(self, ctx)

    TyperArgument.display_type_rich = display_type  # type: ignore[method-assign]
    _done = True
