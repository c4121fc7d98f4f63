"""`hipmem torch`: get PyTorch's caching allocator for the virtual GPU, and show which is used."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..replay.pytorch import allocator as torch_allocator
from ..replay.pytorch import fetch as torch_fetch
from ..replay.pytorch import release as torch_release
from . import output
from .options import JsonOption

DOCS = "Docs: hipmem docs pytorch-virtual-gpu"
torch_app = typer.Typer(
    help="Get PyTorch's caching allocator for replays on the virtual GPU, and show which is used.",
    epilog=DOCS,
)

FETCH_EPILOG = f"""\b
Examples:
  hipmem torch fetch
  hipmem torch fetch --torch 2.11,2.14
  hipmem torch fetch --wheel \\
    torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl

Fetches any PyTorch release from {torch_release.OLDEST} on (PyPI's default Linux wheels, found
by pip with your pip configuration, its constraints included) and the CUDA headers its wheel
requires; keeps libc10.so, libc10_cuda.so and the headers (about 10 MB a version) and deletes
the wheel.

Exit codes: 0 ready; 1 the download or a check failed (run it again); 2 usage;
130 interrupted.

{DOCS}
"""

WHERE_EPILOG = """\b
Examples:
  hipmem torch where
  hipmem torch where --torch 2.9 --json

\b
Search order (the first that applies answers):
  1. --torch VERSION or $HIPMEM_TORCH: the installed PyTorch if it is a CUDA build of that
     version, else the one `hipmem torch fetch --torch VERSION` fetched;
  2. otherwise the installed PyTorch if it is a CUDA build, else the newest fetched one.

Exit codes: 0 an allocator answers; 1 none does (the line says why and what to run);
2 usage; 130 interrupted.

Docs: hipmem docs pytorch-virtual-gpu
"""

DEVICES_EPILOG = """\b
Examples:
  hipmem torch devices
  hipmem torch devices --json

Exit codes: 0 listed; 2 usage; 130 interrupted.

Docs: hipmem docs pytorch-virtual-gpu
"""


@torch_app.command("fetch", epilog=FETCH_EPILOG)
def fetch(
    torch: Annotated[
        Optional[str],  # noqa: UP045 - typer reads the annotation at runtime on Python 3.10
        typer.Option(
            "--torch",
            help="Release(s) to fetch: 2.14 (the newest 2.14.x), 2.14.1, or several "
            "(2.11,2.14). Default: the --wheel's release, else $HIPMEM_TORCH, else the newest.",
            show_default=False,
        ),
    ] = None,
    wheel: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--wheel",
            help="Take the torch wheel (any release) from this file instead of downloading it.",
            metavar="FILE",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Download PyTorch's allocator (libc10_cuda.so) and the CUDA headers into the cache."""
    names = torch_allocator.releases_to_fetch(torch, wheel=wheel)  # checked before any download
    for name in names:
        title = f"fetching PyTorch {name or '(the newest)'}"
        with output.progress(title, steps_when_piped=True) as report:
            found = torch_fetch.fetch(name, wheel=wheel, progress=report, notice=output.warning)
        packages = ", ".join(f"{pkg} {version}" for pkg, version in found.packages.items())
        output.info(f"PyTorch {found.packages.get('torch', found.version)}'s allocator ready in "
                    f"{found.root}")  # fmt: skip
        output.note(f"{packages}; stands in for libcudart.so.{found.cuda_major}", err=True)


@torch_app.command("where", epilog=WHERE_EPILOG)
def where(
    torch: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--torch", help="The version asked for (as replay's --torch).", show_default=False
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Say which PyTorch allocator the virtual GPU runs, and list the fetched ones."""
    chosen = torch_allocator.locate(torch)
    installed = torch_allocator.installed_torch()
    payload: dict[str, Any] = {
        "allocator": {
            "version": chosen.version,
            "origin": chosen.origin,
            "location": str(chosen.location),
            "cuda_runtime": chosen.soname,
        },
        "installed": None
        if installed is None
        else {"version": installed.version, "cuda": installed.cuda, "path": str(installed.package)},
        "fetched": torch_fetch.fetched_versions(),
    }
    if json:
        output.print_json(payload)
        return
    output.line(f"the virtual GPU runs {chosen.describe()}, standing in for {chosen.soname}")
    fetched = ", ".join(payload["fetched"]) or "none (hipmem torch fetch)"
    output.note(f"fetched: {fetched}")


@torch_app.command("devices", epilog=DEVICES_EPILOG)
def devices(json: JsonOption = False) -> None:
    """List the GPUs the virtual GPU can stand for (--device), with where each figure is from."""
    from ..replay.virtual.devices import DEFAULT_DEVICE, FITS_DEVICES

    if json:
        output.print_json(
            {"default": DEFAULT_DEVICE, "devices": [p.as_dict() for p in FITS_DEVICES.values()]}
        )
        return
    table = output.Table(
        "Virtual GPUs (replay --backend virtual --device NAME)",
        ["device", "memory", "bytes", "memory from"],
        right=("memory", "bytes"),
    )
    for preset in FITS_DEVICES.values():
        name = preset.name + (" (default)" if preset.name == DEFAULT_DEVICE else "")
        table.add_row(name, output.human_bytes(preset.memory_bytes), f"{preset.memory_bytes:,}",
                      preset.memory_source)  # fmt: skip
    output.print_table(table)
    granularities = sorted({p.granularity_source for p in FITS_DEVICES.values()})
    output.note("granularity: " + "; ".join(granularities))


def register(app: typer.Typer) -> None:
    app.add_typer(torch_app, name="torch")
