"""`hipmem rmm`: get RAPIDS RMM's resources for replays on the virtual GPU, and list them."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from ..replay.rmm import fetch as rmm_fetch
from . import output
from .options import JsonOption

DOCS = "Docs: hipmem docs rmm-virtual"
rmm_app = typer.Typer(
    help="Get RMM's memory resources (librmm-cu12 from PyPI) for replays on the virtual GPU.",
    epilog=DOCS,
)

FETCH_EPILOG = f"""\b
Examples:
  hipmem rmm fetch
  hipmem rmm fetch --rmm 24.12,25.4

Fetches librmm-cu12 {rmm_fetch.OLDEST} to 25.4 (header-only on PyPI; later releases link the
CUDA runtime statically into librmm.so, which the virtual GPU cannot stand in for), the
rapids-logger it requires and the CUDA 12 runtime headers, with pip (your pip configuration);
keeps about 5 MB a release. The resources are compiled with g++ on first use (about 10 s).

Exit codes: 0 ready; 1 the download or a check failed (run it again); 2 usage;
130 interrupted.

{DOCS}
"""

LIST_EPILOG = f"""\b
Examples:
  hipmem rmm list
  hipmem rmm list --json

Exit codes: 0 listed; 2 usage; 130 interrupted.

{DOCS}
"""


@rmm_app.command("fetch", epilog=FETCH_EPILOG)
def fetch(
    rmm: Annotated[
        Optional[str],  # noqa: UP045 - typer reads the annotation at runtime on Python 3.10
        typer.Option(
            "--rmm",
            help=f"Release(s) to fetch: 25.4, 24.12.1, or several (24.12,25.4). Default: "
            f"{rmm_fetch.DEFAULT_RMM}.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Download RMM's headers (librmm-cu12) and the CUDA 12 runtime headers into the cache."""
    names: list[str | None] = [n.strip() for n in (rmm or "").split(",") if n.strip()] or [None]
    for name in names:  # every name checked before any download
        rmm_fetch.check_supported(name or rmm_fetch.DEFAULT_RMM)
    for name in names:
        title = f"fetching RMM {name or rmm_fetch.DEFAULT_RMM}"
        with output.progress(title, steps_when_piped=True) as report:
            found = rmm_fetch.fetch(name, progress=report)
        packages = ", ".join(f"{pkg} {version}" for pkg, version in found.packages.items())
        output.info(f"RMM {found.version} ready in {found.root}")
        output.note(packages, err=True)


@rmm_app.command("list", epilog=LIST_EPILOG)
def list_fetched(json: JsonOption = False) -> None:
    """List the fetched RMM releases (replay's --rmm picks one; the default is marked)."""
    versions = rmm_fetch.fetched_versions()
    payload: dict[str, Any] = {"default": rmm_fetch.DEFAULT_RMM, "fetched": versions}
    if json:
        output.print_json(payload)
        return
    if not versions:
        output.line("no RMM release fetched (hipmem rmm fetch)")
        return
    for version in versions:
        mark = " (default)" if version == rmm_fetch.DEFAULT_RMM else ""
        output.line(f"RMM {version}{mark}: {rmm_fetch.rmm_dir() / version}")


def register(app: typer.Typer) -> None:
    app.add_typer(rmm_app, name="rmm")
