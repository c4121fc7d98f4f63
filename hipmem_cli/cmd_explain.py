"""`hipmem explain SNAPSHOT`: why PyTorch's allocator ran out of memory, and what avoids it."""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..replay.explain.explanation import Explanation
from . import output
from .html_output import captured, check_html_option, write_html
from .options import (
    DeviceMemoryOption,
    JsonOption,
    PlotOption,
    SegmentsHtmlOption,
    TorchVersionOption,
    VirtualDeviceOption,
    check_plot_option,
    memory_bytes,
)

EPILOG = """\b
Examples:
  hipmem explain tests/data/snapshots/multistream-oom.pickle.gz --device H200 --cap 750549401
  hipmem explain run.pickle --device MI300X --alloc-conf expandable_segments:True --json
  hipmem explain run.pickle --device-memory 24GiB --plot state.png
  hipmem explain run.pickle --device H200 --html why.html

The snapshot is replayed through PyTorch's own allocator on a virtual GPU up to the first
request it refuses (a request that ran out of memory when recorded is replayed as it was);
the allocator's state there is read from the allocator itself. Then every setting of
`recommend --from-snapshot`'s grid is replayed over the whole trace under the same device
memory and cap: those named served every request.

Exit codes: 0 a refusal was explained, or nothing was refused; 1 the snapshot cannot be read or
the replay failed; 2 usage; 130 interrupted.

Docs: hipmem docs explain
"""


class Build(str, Enum):
    rocm = "rocm"
    cuda = "cuda"


def explain_command(
    snapshot: Annotated[
        Path,
        typer.Argument(
            help="PyTorch memory snapshot (torch.cuda.memory._dump_snapshot).",
            exists=True,
            dir_okay=False,
            show_default=False,
        ),
    ],
    device: VirtualDeviceOption = None,
    device_memory: DeviceMemoryOption = None,
    cap: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--cap",
            metavar="SIZE",
            help="A per-process memory cap on the device, as "
            "torch.cuda.set_per_process_memory_fraction(SIZE / device memory) sets it.",
            show_default=False,
        ),
    ] = None,
    torch: TorchVersionOption = None,
    alloc_conf: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--alloc-conf",
            metavar="SETTINGS",
            help="PyTorch's allocator settings to explain under. Default: the recorded ones.",
            show_default=False,
        ),
    ] = None,
    build: Annotated[
        Build,
        typer.Option("--for", help="The PyTorch build the advice is for (ROCm or CUDA)."),
    ] = Build.rocm,
    json: JsonOption = False,
    plot: PlotOption = None,
    html: SegmentsHtmlOption = None,
) -> None:
    """Why the allocator refused a request of the snapshot, and which settings avoid it."""
    check_plot_option(plot)
    check_html_option(html)
    kept = captured() if html else contextlib.nullcontext(output.Captured())
    with kept as printed:
        found = explain_snapshot(
            snapshot, device, device_memory, cap, torch, alloc_conf, build.value, json
        )
    if html is not None:
        _write_page(html, found, printed)
    if plot is not None and found.state is not None:
        from ..replay.explain.plot import write_state_plot

        write_state_plot(plot, found)
        if not json:
            output.written("plot", plot)


def _write_page(path: Path, found: Explanation, printed: output.Captured) -> None:
    from ..replay.explain.html import state_figure

    title = f"hipmem explain: {Path(found.snapshot).name}"
    refused = found.refused
    headline = (
        [f"refused: {refused.size_bytes:,} bytes at {refused.where}"]
        if refused is not None
        else ["every request was served: nothing to explain under these conditions"]
    )
    write_html(path, title, printed, figure=state_figure(found), headline=headline)


def explain_snapshot(
    snapshot: Path,
    device: str | None,
    device_memory: str | None,
    cap: str | None,
    torch: str | None,
    alloc_conf: str | None,
    build: str,
    json: bool,
) -> Explanation:
    """Explain, then print the JSON or the text."""
    from ..replay.explain.explanation import explain
    from .explain_output import render_explanation, render_inferred

    memory = memory_bytes(device_memory, "--device-memory")
    cap_bytes = memory_bytes(cap, "--cap")
    with output.progress("explaining") as report:
        found = explain(
            snapshot,
            device=device if memory is None else None,
            device_memory_bytes=memory,
            cap_bytes=cap_bytes,
            torch_version=torch,
            settings=alloc_conf,
            torch_build=build,
            progress=report,
        )
    render_inferred(found)
    if json:
        output.print_json(found.as_dict())
    else:
        render_explanation(found)
    return found


def register(app: typer.Typer) -> None:
    app.command("explain", epilog=EPILOG)(explain_command)
