"""Options shared by several commands, as `Annotated` aliases."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..sizing.rocm.releases import NEWEST, release_names

DeviceOption = Annotated[
    Optional[str],  # noqa: UP045 - typer reads the annotation at runtime on Python 3.10
    typer.Option(
        "--device",
        "-d",
        metavar="DEVICE",
        help="Arch (gfx90a, gfx942, ...) or product (MI210, MI300X, 'Radeon RX 7900 XTX'). "
        "Default: the real AMD GPU, when there is one.",
    ),
]
CusOption = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--cus", help="Override the device's compute-unit count.", min=1, metavar="N"),
]
RocmDirOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--rocm-dir",
        metavar="DIR",
        help="Directory holding librocblas/librocsolver (else HIPMEM_ROCM_LIBDIR, ROCM_PATH, "
        "/opt/rocm, the loader path, then the offline cache).",
    ),
]
RocmOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--rocm",
        help=f"ROCm release to answer with ({', '.join(release_names())}). Default: "
        f"$HIPMEM_ROCM, else the local install, else the newest release in the cache "
        f"({NEWEST.name}, fetched, when it is empty).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON only.")]
# size, recommend, check: what the cache lacks is fetched on first use unless this says not to.
OfflineOption = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Never download: when the cache lacks the ROCm release (or hipBLASLt build) this "
        "needs, fail naming the `hipmem rocm fetch` to run. Also HIPMEM_OFFLINE=1.",
    ),
]

# One rule for every --plot (replay and log inspect): see replay/plot_files.py.
PlotOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--plot",
        help="Write a plot to FILE; its suffix picks the format (.png or .svg).",
        metavar="FILE",
    ),
]


# One rule for every --html (replay, log inspect, recommend --from-snapshot, explain):
# hipmem/_core/html_files.py; the page: hipmem_cli/html_output.py. Its help says what the
# page draws: the live bytes over time, or (explain) the segments at the refusal.
HtmlOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--html",
        help="Write one self-contained page to FILE (.html): a timeline to zoom and hover, "
        "and the tables.",
        metavar="FILE",
    ),
]
SegmentsHtmlOption = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option(
        "--html",
        help="Write one self-contained page to FILE (.html): the allocator's segments and "
        "blocks at the refusal, to zoom and hover, and the tables.",
        metavar="FILE",
    ),
]


def check_plot_option(path: Path | None) -> None:
    """Refuse a --plot FILE that cannot be written before any work starts."""
    if path is not None:
        from hipmem._core.plot_files import check_plot_path

        check_plot_path(path)


# Call sources shared by `size`, `recommend` and `check` (see sizing/calls/sources.py).
FromLogOption = Annotated[
    Optional[list[Path]],  # noqa: UP045
    typer.Option(
        "--from-log",
        help="rocBLAS/rocSOLVER call log (bench, trace or profile) to size; repeatable.",
        metavar="FILE",
        exists=True,
        dir_okay=False,
    ),
]
WorkloadOption = Annotated[
    Optional[list[Path]],  # noqa: UP045
    typer.Option(
        "--workload",
        help="Workload file of calls (hipmem docs call-logs); repeatable.",
        metavar="FILE",
        exists=True,
        dir_okay=False,
    ),
]
StrictOption = Annotated[
    bool, typer.Option("--strict", help="Make the first unreadable log line an error.")
]

# `check` and `recommend` answer about the whole input or not at all (docs/hostile-input.md).
AcceptSkippedOption = Annotated[
    bool,
    typer.Option(
        "--accept-skipped",
        help="Answer from the readable rest when log lines or snapshot entries cannot be read "
        "(default: exit 1 naming them); the answer then says how many were skipped.",
    ),
]

# Sweeps (`size`, `recommend`, `check`; see sizing/sweeps/).
SweepOption = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--sweep",
        metavar="ARG=RANGE",
        help="ARG=RANGE: size each CALL at every value: 1..64, 1..4096:64 (step), 1..65536*2 "
        "(powers) or 1,8,20,64; repeat for a grid. Reports the largest need and where.",
        show_default=False,
    ),
]
MAX_POINTS_DEFAULT_TEXT = "1000000"  # sizing.sweep_range.DEFAULT_MAX_POINTS
MaxPointsOption = Annotated[
    str,
    typer.Option("--max-points", metavar="N", help="The most sweep points sized in one request."),
]
# recommend and check: the same words in both (size says more, about what it adds to the table).
MinimumOption = Annotated[
    bool,
    typer.Option(
        "--minimum",
        help="Measure each call's minimum workspace (by executing it on the virtual "
        "device) and use it: calls between their minimum and optimal run degraded.",
    ),
]

# The virtual GPU (`replay` and `fleet` with --backend virtual; see replay/virtual/devices.py).
VirtualDeviceOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--device",
        metavar="NAME",
        help="Virtual GPU to replay PyTorch's allocator or RMM's resources on: MI300X "
        "(default), MI325X, MI355X, "
        "MI250X, MI210, H100, H200, A100-40GB, A100-80GB.",
        show_default=False,
    ),
]
DeviceMemoryOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--device-memory",
        metavar="SIZE",
        help="A virtual GPU of this much memory instead of a --device (e.g. 24GiB).",
        show_default=False,
    ),
]
TorchVersionOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--torch",
        metavar="VERSION",
        help="PyTorch whose allocator runs on the virtual GPU (2.14, 2.11.0). Default: "
        "$HIPMEM_TORCH, else the installed CUDA PyTorch, else the newest fetched.",
        show_default=False,
    ),
]

RmmVersionsOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--rmm",
        metavar="VERSION[,VERSION]",
        help="RMM release whose resources run on the virtual GPU (25.4, 24.12), or several "
        "side by side (24.12,25.4); `hipmem rmm fetch` gets them. Default: 25.4.0.",
        show_default=False,
    ),
]
TorchVersionsOption = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--torch",
        metavar="VERSION[,VERSION]",
        help="PyTorch whose allocator runs on the virtual GPU (2.14, 2.11.0), or several "
        "side by side (2.11,2.14). Default: $HIPMEM_TORCH, else the installed CUDA PyTorch, "
        "else the newest fetched.",
        show_default=False,
    ),
]

# PyTorch's allocator settings from memory snapshots (`recommend` and `check`; see
# replay/settings/recommend.py).
FromSnapshotOption = Annotated[
    Optional[list[Path]],  # noqa: UP045
    typer.Option(
        "--from-snapshot",
        help="PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) to replay through "
        "PyTorch's allocator on a virtual GPU; repeatable (one setting for all of them). "
        "--device then names the virtual GPU.",
        metavar="FILE",
        exists=True,
        dir_okay=False,
    ),
]

# The calls to size, as `size` takes them (`recommend`, `check`).
CallsArgument = Annotated[
    Optional[list[str]],  # noqa: UP045 - typer reads annotations at runtime
    typer.Argument(
        help="ROUTINE[:ARG=VALUE,...], e.g. rocsolver_dgetrf:m=1024,n=1024",
        show_default=False,
        metavar="CALL",
    ),
]


def memory_bytes(text: str | None, option: str) -> int | None:
    """--device-memory and --cap: whole bytes, or a decimal IEC size as hipmem prints it
    (`1.4GiB`) rounded down to whole bytes, which is said once on stderr."""
    if text is None:
        return None
    from hipmem._core.byte_sizes import parse_rounded_bytes

    from . import output

    found, rounded = parse_rounded_bytes(text, name=option)
    if rounded:
        output.info(f"{option} {text} is {found:,} bytes")
    return found


def said_limits(specs: list[str]) -> None:
    """`limit=` of each `-r` spec, rounded down when given as a decimal IEC size (`1.4GiB`):
    said once on stderr, as --cap's is. The specs are parsed already (so well formed)."""
    from hipmem._core.byte_sizes import parse_rounded_bytes

    from . import output

    for spec in specs:
        for pair in spec.partition(":")[2].split(","):
            name, _, value = pair.partition("=")
            if name.strip().lower() == "limit":
                found, rounded = parse_rounded_bytes(value, name="limit")
                if rounded:
                    output.info(f"limit={value.strip()} is {found:,} bytes")
