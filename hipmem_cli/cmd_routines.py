"""`hipmem routines [PATTERN]`: the routines hipmem can size, their arguments and defaults."""

from __future__ import annotations

import fnmatch
from typing import Annotated, Any, Optional

import typer

from ..sizing.defaults import rules_for
from ..sizing.errors import SizingUsageError
from ..sizing.rocm.catalog import Catalog, Routine, catalog_releases, load_catalog
from ..sizing.rocm.choice import requested
from . import output
from .options import JsonOption, RocmOption


def routines(
    pattern: Annotated[
        Optional[str],  # noqa: UP045 - typer reads annotations at runtime
        typer.Argument(
            help="Substring or glob (*, ?) of routine names, e.g. getrf or 'rocblas_?gemm*'.",
            show_default=False,
            metavar="PATTERN",
        ),
    ] = None,
    rocm: RocmOption = None,
    json: JsonOption = False,
) -> None:
    """List the routines hipmem can size, with their arguments and default rules."""
    catalog = load_catalog(_release(rocm))
    found = matching(catalog, pattern)
    if not found:
        raise SizingUsageError(
            f"no routine matches '{pattern}' (try a shorter pattern, e.g. getrf)"
        )
    if json:
        output.print_json(
            [describe(routine, catalog) | {"rocm": catalog.release} for routine in found]
        )
        return
    versions = ", ".join(f"{name} {version}" for name, version in catalog.versions.items())
    title = f"{len(found):,} routines in ROCm {catalog.release} ({versions})"
    table = output.Table(title, ["routine", "arguments (default rule; * = required)"])
    for routine in found:
        table.add_row(routine.name, _argument_text(describe(routine, catalog)))
    output.print_table(table)


def _release(option: str | None) -> str | None:
    """The release whose headers the catalog comes from: the one asked for, else the one that
    would answer a size query here, else the newest catalog."""
    names, asked_as = requested(option)
    if len(names) > 1:
        raise SizingUsageError(f"{asked_as} {','.join(names)}: routines takes one release")
    if names:
        if names[0] not in catalog_releases():
            known = ", ".join(catalog_releases())
            raise SizingUsageError(
                f"hipmem has catalogs of ROCm {known}", parameter=asked_as, value=names[0]
            )
        return names[0]
    from ..sizing.errors import SizingError
    from ..sizing.rocm.locator import locate

    try:
        return locate().rocm
    except SizingError:
        return None


def matching(catalog: Catalog, pattern: str | None) -> list[Routine]:
    """Routines whose name matches: a glob when the pattern has one, else a substring."""
    names = sorted(catalog.routines)
    if pattern:
        lowered = pattern.lower()
        if any(ch in pattern for ch in "*?["):
            short = {n: catalog.routines[n].short_name for n in names}
            names = [
                n
                for n in names
                if fnmatch.fnmatchcase(n, lowered) or fnmatch.fnmatchcase(short[n], lowered)
            ]
        else:
            names = [n for n in names if lowered in n]
    return [catalog.routines[name] for name in names]


def describe(routine: Routine, catalog: Catalog) -> dict[str, Any]:
    """A routine as data: what it is, and each argument a user may set with its default."""
    rules = rules_for(routine.family)
    arguments = []
    for param in routine.params:
        if not param.user_settable:
            continue
        entry: dict[str, Any] = {
            "name": param.name,
            "c_type": param.c_type,
            "default": rules.get(param.name),
            "required": param.name not in rules,
        }
        if param.enum is not None:
            entry["values"] = list(catalog.enums[param.enum])
        arguments.append(entry)
    return {
        "name": routine.name,
        "library": routine.library,
        "family": routine.family,
        "precision": routine.precision,
        "batch": routine.batch,
        "ilp64": routine.ilp64,
        "arguments": arguments,
    }


def _argument_text(description: dict[str, Any]) -> str:
    parts = []
    for argument in description["arguments"]:
        if argument["required"]:
            parts.append(f"{argument['name']}*")
        else:
            parts.append(output.whole(f"{argument['name']}={argument['default']}"))
    return "  ".join(parts)


EPILOG = """\b
Examples:
  hipmem routines getrf
  hipmem routines 'rocblas_?gemm*'
  hipmem routines syevd --json

Exit codes: 0 listed; 2 no routine matches (usage); 130 interrupted.

Docs: hipmem docs size
"""


def register(app: typer.Typer) -> None:
    app.command("routines", epilog=EPILOG)(routines)
