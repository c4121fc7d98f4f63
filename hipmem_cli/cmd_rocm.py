"""`hipmem rocm`: get the vendor libraries (offline, from Debian) and show which are used."""

from __future__ import annotations

from typing import Annotated

import typer

from hipmem_cli import output
from hipmem_cli.command_help import FETCH_EPILOG, WHERE_EPILOG
from hipmem_cli.options import JsonOption, RocmDirOption
from sizing import rocm_fetch
from sizing.library_locator import locate
from sizing.shim_build import build_shim

rocm_app = typer.Typer(help="Get rocBLAS/rocSOLVER for size queries, and show which are used.")


@rocm_app.command("fetch", epilog=FETCH_EPILOG)
def fetch(
    arch: Annotated[
        list[str] | None,
        typer.Option(
            "--arch",
            help="Keep gemm data for these archs only (default: all Debian ships).",
            metavar="ARCH",
        ),
    ] = None,
    suite: Annotated[
        str, typer.Option(help="Debian suite to take the builds from.", metavar="SUITE")
    ] = rocm_fetch.DEFAULT_SUITE,
    mirror: Annotated[
        str, typer.Option(help="Debian mirror URL.", metavar="URL")
    ] = rocm_fetch.DEFAULT_MIRROR,
) -> None:
    """Download Debian's rocBLAS and rocSOLVER into the user cache (resumable, idempotent)."""
    with output.progress("fetching ROCm", transfer=True) as report:
        result = rocm_fetch.fetch(arch or rocm_fetch.SHIPPED_ARCHS, suite, mirror, report)
        shim_dir = build_shim(result.include_dir)
    packages = ", ".join(f"{name} {version}" for name, version in result.packages.items())
    output.info(f"ROCm libraries ready in {result.root}")
    output.note(
        f"{packages}; gemm data for {', '.join(result.archs)}; virtual device {shim_dir}", err=True
    )


@rocm_app.command("where", epilog=WHERE_EPILOG)
def where(rocm_dir: RocmDirOption = None, json: JsonOption = False) -> None:
    """Show which rocBLAS/rocSOLVER a size query would load, and where they were found."""
    found = locate(rocm_dir)
    info = {
        "found_in": found.found_in,
        "rocblas": str(found.rocblas),
        "rocsolver": str(found.rocsolver) if found.rocsolver else None,
        "loader": str(found.loader) if found.loader else None,
        "tensile_dir": str(found.tensile_dir) if found.tensile_dir else None,
    }
    if json:
        output.print_json(info)
        return
    table = output.Table(None, ["what", "where"], boxed=False, header=False)
    for key, value in info.items():
        table.add_row(key, str(value))
    output.print_table(table)


def register(app: typer.Typer) -> None:
    app.add_typer(rocm_app, name="rocm")
