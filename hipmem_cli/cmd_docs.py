"""`hipmem docs`: where this install keeps the documentation, a page of it, or the list.

The pages (the repository's docs/) install with the package as `hipmem/docs/` (setup.py
copies them, MANIFEST.in puts them in the source distribution), so a user of the wheel has
them as a user of a clone does; in a checkout they are the checkout's docs/ folder. Every
command's help ends with the page that documents it, as this command names it
(`Docs: hipmem docs replay`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from hipmem._core.errors import HipmemError, UsageError

from . import output

_TITLE = re.compile(r"^# (.+)$", re.M)

EPILOG = """\b
Examples:
  hipmem docs
  hipmem docs quickstart
  less "$(hipmem docs replay)"

Exit codes: 0 printed; 1 this install has no documentation; 2 no such page.

Docs: hipmem docs index
"""


class NoDocs(HipmemError):
    """The install carries no docs/ (a build that left them out)."""


def docs_folder() -> Path:
    """The folder of the pages: `hipmem/docs` in an install, the checkout's `docs/`."""
    import hipmem

    package = Path(hipmem.__file__).resolve().parent
    for folder in (package / "docs", package.parent / "docs"):
        if (folder / "index.md").is_file():
            return folder
    raise NoDocs(f"no documentation in this install ({package / 'docs'} has no index.md)")


def pages(folder: Path) -> dict[str, Path]:
    """Each page by the name `hipmem docs NAME` takes (its file name without `.md`)."""
    return {path.stem: path for path in sorted(folder.glob("*.md"))}


def docs(
    page: Annotated[
        Optional[str],  # noqa: UP045 - typer reads the annotation at runtime on Python 3.10
        typer.Argument(help="A page (quickstart, replay, ...); none: the list.", metavar="PAGE"),
    ] = None,
) -> None:
    """Print where the documentation is: a page's file, or the list of pages."""
    folder = docs_folder()
    found = pages(folder)
    if page is not None:
        name = page.removesuffix(".md").removeprefix("docs/")
        if name not in found:
            raise UsageError(f"no page {page!r}: the pages are {', '.join(found)}")
        output.line(str(found[name]))
        return
    output.line(f"the documentation: {found['index']} (start there)")
    table = output.Table(None, ["page", "title"], boxed=False)
    for name, path in found.items():
        title = _TITLE.search(path.read_text(errors="replace"))
        table.add_row(name, title.group(1).replace("`", "") if title else "")
    output.print_table(table)


def register(app: typer.Typer) -> None:
    app.command("docs", epilog=EPILOG)(docs)
