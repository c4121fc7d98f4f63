"""`hipmem rocm`: get the vendor libraries (offline, from Debian) and show which are used."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..sizing.errors import PinnedVersionGone, SizingError
from ..sizing.hipblaslt.fetch import fetch_hipblaslt
from ..sizing.hipblaslt.locator import hipblaslt_beside
from ..sizing.hipblaslt.releases import for_rocm
from ..sizing.rocm import fetch as rocm_fetch
from ..sizing.rocm.apt import DEFAULT_MIRROR
from ..sizing.rocm.choice import requested
from ..sizing.rocm.locator import Libraries, available, is_cache_label, locate
from ..sizing.rocm.on_demand import download_line
from ..sizing.rocm.releases import NEWEST, RELEASES, find_release
from ..sizing.worker.shim_build import build_shim
from . import output
from .command_help import FETCH_EPILOG, ROCM_EPILOG, WHERE_EPILOG
from .options import JsonOption, RocmDirOption

rocm_app = typer.Typer(
    help="Get rocBLAS/rocSOLVER for size queries, and show which are used.", epilog=ROCM_EPILOG
)


@rocm_app.command("fetch", epilog=FETCH_EPILOG)
def fetch(
    rocm: Annotated[
        str | None,
        typer.Option(
            "--rocm",
            help=f"Release(s) to fetch: {', '.join(r.name for r in RELEASES)}, or several "
            f"(6.4,7.2). Default: $HIPMEM_ROCM, else the newest ({NEWEST.name}).",
            show_default=False,
        ),
    ] = None,
    arch: Annotated[
        list[str] | None,
        typer.Option(
            "--arch",
            help="Keep gemm data for these archs only (default: all the release has).",
            metavar="ARCH",
        ),
    ] = None,
    mirror: Annotated[str, typer.Option(help="Debian mirror URL.", metavar="URL")] = DEFAULT_MIRROR,
    hipblaslt: Annotated[
        bool,
        typer.Option(
            "--hipblaslt/--no-hipblaslt",
            help="Also fetch the hipBLASLt build that runs on each release (7.1.1 on 6.4, "
            "7.2.4 on 7.2) with the solution data of the archs asked for.",
        ),
    ] = True,
) -> None:
    """Download Debian's rocBLAS and rocSOLVER into the user cache (resumable, idempotent).

    size, recommend and check fetch what they need on first use; this fetches ahead (every
    arch's data unless --arch). With several releases, one whose pinned packages have left
    the archive is reported and skipped; the command fails when none could be fetched."""
    names = requested(rocm)[0] or [NEWEST.name]
    releases = [find_release(name) for name in names]  # every name checked before any download
    gone: list[PinnedVersionGone] = []
    for release in releases:
        with output.progress(f"fetching ROCm {release.name}", transfer=True) as report:
            try:
                result = rocm_fetch.fetch(
                    release.name, arch, mirror, report, output.warning, plan=_say_plan
                )
            except PinnedVersionGone as err:
                if len(releases) == 1:
                    raise
                output.warning(str(err))
                gone.append(err)
                continue
            shim_dir = build_shim(result.include_dir, release.hip_soname)
        packages = ", ".join(f"{name} {version}" for name, version in result.packages.items())
        done = "ready in" if result.changed else "already in the cache, intact:"
        output.info(
            f"ROCm {release.name} {done} {result.root} "
            f"({output.human_bytes(result.disk_bytes())} on disk; {len(result.files)} files "
            "checked by SHA256)"
        )
        output.note(
            f"{packages}; gemm data for {', '.join(result.archs)}; virtual device {shim_dir}",
            err=True,
        )
        if hipblaslt:
            _fetch_hipblaslt(release.name, arch, mirror)
    for legacy in rocm_fetch.legacy_dirs():
        output.warning(f"{legacy} is hipmem's earlier cache layout, no longer read: delete it")
    if len(gone) == len(releases):
        raise PinnedVersionGone(f"none of ROCm {', '.join(names)} can be fetched (see above)")


@rocm_app.command("where", epilog=WHERE_EPILOG)
def where(rocm_dir: RocmDirOption = None, json: JsonOption = False) -> None:
    """List every ROCm release found (installs and cache), and which one answers by default."""
    found = available(rocm_dir)
    try:
        default: Libraries | None = locate(rocm_dir)
    except SizingError:
        default = None
    entries = [_describe(libraries, default) for libraries in found]
    if json:
        output.print_json({"releases": entries})
        return
    if not entries:
        output.line("no ROCm found: run `hipmem rocm fetch`")
    for entry in entries:
        mark = "*" if entry["default"] else " "
        output.line(f"{mark} ROCm {entry['rocm'] or '?':5} {entry['found_in']}")
        table = output.Table(None, ["what", "where"], boxed=False, header=False)
        keys = ("rocblas", "rocsolver", "hipblaslt", "loader", "tensile_dir", "gemm_archs")
        for key in (*keys, "disk_bytes"):
            if entry.get(key) is not None:
                table.add_row(f"   {key}", str(entry[key]))
        output.print_table(table)
    if default is not None:
        output.line(f"* answers without --rocm ({default.why})")


def _describe(libraries: Libraries, default: Libraries | None) -> dict[str, Any]:
    hipblaslt = hipblaslt_beside(libraries)
    entry: dict[str, Any] = {
        "rocm": libraries.rocm,
        "found_in": libraries.found_in,
        "default": default is not None and default.lib_dir == libraries.lib_dir,
        "rocblas": str(libraries.rocblas),
        "rocsolver": str(libraries.rocsolver) if libraries.rocsolver else None,
        "hipblaslt": str(hipblaslt) if hipblaslt else None,
        "loader": str(libraries.loader) if libraries.loader else None,
        "tensile_dir": str(libraries.tensile_dir) if libraries.tensile_dir else None,
        "hip_runtime": libraries.hip_soname,
    }
    if is_cache_label(libraries.found_in) and libraries.rocm:
        offline = rocm_fetch.load_offline(libraries.rocm)
        if offline is not None:
            entry["gemm_archs"] = ", ".join(offline.archs)
            entry["disk_bytes"] = offline.disk_bytes()
            entry["packages"] = offline.packages
    return entry


def register(app: typer.Typer) -> None:
    app.add_typer(rocm_app, name="rocm")


def _fetch_hipblaslt(rocm: str, arch: list[str] | None, mirror: str) -> None:
    """The hipBLASLt build that runs on release `rocm`, with its solution data."""
    build = for_rocm(rocm)
    if build is None:
        return
    with output.progress(f"fetching hipBLASLt {build.version}", transfer=True) as report:
        found = fetch_hipblaslt(build.version, arch, mirror, report, output.warning, _say_plan)
    without = [a for a in (arch or []) if a not in build.solution_archs]
    data = f"solution data for {', '.join(found.archs)}" if found.archs else "no solution data"
    note = f"; Debian's build has none for {', '.join(without)}" if without else ""
    done = "ready in" if found.changed else "already in the cache, intact:"
    output.info(f"hipBLASLt {build.version} {done} {found.root} ({data}{note})")


def _say_plan(plan: rocm_fetch.FetchPlan) -> None:
    """The one line before a download: what, how much, where."""
    output.info(download_line(f"fetching {plan.what}", plan))
