"""`hipmem cache`: what the cache holds, whether it is intact, and removing parts of it."""

from __future__ import annotations

from typing import Annotated

import typer

from . import output
from .options import JsonOption

_DOCS = "Docs: hipmem docs cache"
_BY = {"hipmem rocm fetch": "rocm-fetch", "fetched on first use": "first-use"}

cache_app = typer.Typer(
    help="See what hipmem's cache holds, check it and remove parts of it.", epilog=_DOCS
)


@cache_app.command(
    "list",
    epilog="\b\nExamples:\n  hipmem cache list\n  hipmem cache list --json\n\n"
    "Exit codes: 0 listed; 2 usage.\n\n" + _DOCS,
)
def list_command(json: JsonOption = False) -> None:
    """List the ROCm releases (with their archs), hipBLASLt builds, PyTorch allocators and
    native builds in the cache: the disk each takes and when it was fetched."""
    from hipmem import cache_inventory
    from hipmem._core.cache_root import cache_dir

    entries = cache_inventory.list_cache()
    if json:
        output.print_json({"cache": str(cache_dir()), "entries": [e.as_dict() for e in entries]})
        return
    if not entries:
        output.line(f"the cache ({cache_dir()}) is empty")
        return
    # The archs last: the one long value, it goes under its row where the table is too wide
    # (80 columns), and every column keeps its header (`by` lost it when it went under).
    table = output.Table(None, ["what", "disk", "fetched (UTC)", "by", "archs"], boxed=False)
    for entry in entries:
        when = (entry.fetched_at or "")[:16]  # one word: never wrapped inside
        name = entry.what if entry.kind != "builds" else entry.name
        by = _BY.get(entry.how, entry.how) if entry.kind != "torch" else ""
        disk = output.human_bytes(entry.disk_bytes)
        table.add_row(name, disk, when, by, ", ".join(entry.archs))
    output.print_table(table)
    total = sum(entry.disk_bytes for entry in entries)
    output.note(f"{output.human_bytes(total)} on disk in {cache_dir()}")


@cache_app.command(
    "verify",
    epilog="\b\nExamples:\n  hipmem cache verify\n\n"
    "Exit codes: 0 intact; 1 something is damaged (each is named, with the command that "
    "repairs it); 2 usage.\n\n" + _DOCS,
)
def verify_command(json: JsonOption = False) -> None:
    """Re-hash every fetched file, check every build and kept answer; name what is damaged
    or incomplete (a fetch interrupted) and the command that repairs it."""
    from hipmem import cache_inventory

    with output.progress("checking the cache") as report:
        damage = cache_inventory.verify_cache(lambda what: report(0, None, what))
    if json:
        output.print_json({"damaged": [
            {**d.entry.as_dict(), "state": d.state, "first": d.first, "files": d.count,
             "why": d.why or None, "repair": d.entry.repair}
            for d in damage
        ]})  # fmt: skip
    for found in damage:
        output.fail(found.describe())
    if damage:
        raise typer.Exit(1)
    if not json:
        output.ok(f"{len(cache_inventory.list_cache())} parts of the cache are intact")


@cache_app.command(
    "remove",
    epilog="\b\nExamples:\n  hipmem cache remove --rocm 6.4\n  hipmem cache remove --arch "
    "gfx90a\n  hipmem cache remove --kind builds\n  hipmem cache remove --all\n\n"
    "What is removed is fetched or built again by the next command that needs it.\n\n"
    "Exit codes: 0 removed (or nothing matched); 2 usage.\n\n" + _DOCS,
)
def remove_command(
    rocm: Annotated[
        list[str] | None, typer.Option("--rocm", help="ROCm release(s) to remove.")
    ] = None,
    arch: Annotated[
        list[str] | None,
        typer.Option(
            "--arch",
            help="Remove this arch's gemm and solution data (with --rocm: of those releases only).",
            metavar="ARCH",
        ),
    ] = None,
    hipblaslt: Annotated[
        list[str] | None, typer.Option("--hipblaslt", help="hipBLASLt build(s) to remove.")
    ] = None,
    torch: Annotated[
        list[str] | None, typer.Option("--torch", help="PyTorch allocator(s) to remove.")
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            help="Remove every part of a kind: rocm, hipblaslt, torch, builds, answers, apt.",
            metavar="KIND",
        ),
    ] = None,
    everything: Annotated[bool, typer.Option("--all", help="Remove everything.")] = False,
) -> None:
    """Remove parts of the cache, under the fetch locks (a running fetch finishes first)."""
    from hipmem import cache_inventory

    lines = cache_inventory.remove(
        rocm=rocm, arch=arch, hipblaslt=hipblaslt, torch=torch, kinds=kind,
        everything=everything, notice=output.warning,
    )  # fmt: skip
    for text in lines or ["nothing in the cache matched"]:
        output.line(text)


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
