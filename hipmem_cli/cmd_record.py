"""`hipmem record -- COMMAND...`: run a PyTorch script on a virtual GPU, with no GPU."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..replay.record.run import Recording, RecordRequest, record
from ..replay.record.vary import VariedRecordings, parse_variation, record_varied
from ..replay.virtual.devices import DEFAULT_DEVICE, find_device
from . import output
from .options import JsonOption
from .virtual_capacity_output import render_fits

EPILOG = """\b
Examples:
  hipmem record --device H100 -o run.pickle.gz -- python train.py --batch 16
  hipmem record --device MI300X --torch 2.11 -- python gpt_train.py
  hipmem record --alloc-conf expandable_segments:True --json -- python train.py
  hipmem record --device MI300X --vary BATCH=8,16,32 -- python train.py

The command runs unmodified on hipmem's stand-in CUDA libraries: PyTorch's own caching
allocator sees every request the script makes on a GPU, while kernels do nothing; small
device values are computed on the host, the others read back as zeros. The snapshot is
PyTorch's own format: `hipmem replay`, `explain` and `recommend --from-snapshot` read it.

Exit codes: the command's own; 1 the recording could not run or recorded nothing; 2 usage;
130 interrupted.

Docs: hipmem docs record
"""


def record_command(
    command: Annotated[
        list[str],
        typer.Argument(
            metavar="-- COMMAND...",
            help="The command to run, after --: python train.py --batch 16.",
            show_default=False,
        ),
    ],
    device: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--device",
            metavar="NAME",
            help=f"The GPU the virtual one plays (its memory): H100, H200, MI300X, ... "
            f"Default: {DEFAULT_DEVICE}.",
            show_default=False,
        ),
    ] = None,
    torch: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--torch",
            metavar="VERSION",
            help="Run this PyTorch release's CUDA wheel (2.11, 2.11.0), which hipmem installs "
            "into its cache. Default: the PyTorch of the command's Python.",
            show_default=False,
        ),
    ] = None,
    snapshot: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "-o",
            "--output",
            metavar="SNAPSHOT",
            help="Write the memory snapshot here (.pickle, or .pickle.gz to compress).",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    alloc_conf: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--alloc-conf",
            metavar="SETTINGS",
            help="PyTorch's allocator settings for the run (PYTORCH_CUDA_ALLOC_CONF).",
            show_default=False,
        ),
    ] = None,
    vary: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--vary",
            metavar="NAME=V1,V2,...",
            help="Run once per value ({NAME} in the command, else the variable NAME) and say "
            "the largest value that fits.",
            show_default=False,
        ),
    ] = None,
    json: JsonOption = False,
) -> None:
    """Run a PyTorch command on a virtual GPU and record its memory snapshot."""
    played = find_device(device or DEFAULT_DEVICE)
    variation = None if vary is None else parse_variation(vary)
    request = RecordRequest(list(command), played, torch, snapshot, alloc_conf,
                            stdout_to_stderr=json)  # fmt: skip
    if variation is not None:
        name = variation.name
        varied = record_varied(request, variation, notice=_notice,
                               started=lambda value: _notice(f"{name}={value}:"))  # fmt: skip
        if json:
            output.print_json(varied_as_dict(varied))
        else:
            render_varied(varied)
        raise typer.Exit(0 if varied.largest_fitting is not None else 1)
    done = record(request, notice=_notice)
    if json:
        output.print_json(as_dict(done))
    else:
        render(done)
    if done.snapshot is None and done.max_memory_reserved == 0 and done.exit_code == 0:
        raise typer.Exit(1)
    raise typer.Exit(done.exit_code)


def _notice(text: str) -> None:
    """What the recording says while it works: on stderr, off a --json answer's stdout."""
    output.note(text, err=True)


def as_dict(done: Recording) -> dict[str, object]:
    request = done.request
    return {
        "command": request.command,
        "device": request.device.name,
        "device_memory_bytes": request.device.memory_bytes,
        "torch": done.torch_version,
        "alloc_conf": request.alloc_conf,
        "exit_code": done.exit_code,
        "wall_s": round(done.wall_s, 3),
        "snapshot": None if done.snapshot is None else str(done.snapshot),
        "max_memory_reserved": done.max_memory_reserved,
        "max_memory_allocated": done.max_memory_allocated,
        "allocations": done.allocations,
        "out_of_memory": done.out_of_memory,
        "device_reads": done.device_reads,
        "device_read_sites": done.device_read_sites,
        "grad_scaler_steps": done.grad_scaler_steps,
        "cudnn_convolutions": done.cudnn_convolutions,
        "context_bytes": done.context_bytes,
        "max_rss_bytes": done.max_rss_bytes,
        "unseen": list(done.unseen),
        "applied": list(done.applied),
        "fits": [fit.as_dict() for fit in done.fits_table],
    }


def varied_as_dict(varied: VariedRecordings) -> dict[str, object]:
    best = varied.largest_fitting
    return {
        "vary": varied.variation.name,
        "largest_fitting": None if best is None else _value_of(varied, best),
        "by_device": [
            {
                "device": a.device.name,
                "memory_bytes": a.device.memory_bytes,
                "largest": a.value,
                "peak_reserved_bytes": a.peak_reserved_bytes,
                "bounded": a.bounded,
            }
            for a in varied.by_device()
        ],
        "runs": [
            {"value": value, "fits": varied.fits(done), **as_dict(done)}
            for value, done in zip(varied.variation.values, varied.recordings, strict=True)
        ],
    }


def _value_of(varied: VariedRecordings, done: Recording) -> str:
    return varied.variation.values[varied.recordings.index(done)]


def render_varied(varied: VariedRecordings) -> None:
    name = varied.variation.name
    first = varied.recordings[0]
    device = first.request.device.name
    table = output.Table(
        f"{name} on a virtual {device} ({output.human_bytes(first.request.device.memory_bytes)})",
        [name, "peak reserved", "peak allocated", "outcome"],
        right=("peak reserved", "peak allocated"),
    )
    for value, done in zip(varied.variation.values, varied.recordings, strict=True):
        outcome = ("fits" if varied.fits(done) else "out of memory" if done.out_of_memory
                   else f"failed (exit code {done.exit_code})")  # fmt: skip
        table.add_row(value, _bytes(done.max_memory_reserved), _bytes(done.max_memory_allocated),
                      outcome)  # fmt: skip
    output.print_table(table)
    best = varied.largest_fitting
    if best is None:
        output.error(f"no {name} given fits on a virtual {device}")
    else:
        output.line(f"Largest {name} that fits on a virtual {device}: {_value_of(varied, best)} "
                    f"(peak reserved {_bytes(best.max_memory_reserved)})")  # fmt: skip
    _render_by_device(varied)
    _say_applied(first)
    output.note(f"PyTorch {first.torch_version}; not seen: " + "; ".join(first.unseen) + ".")


def _render_by_device(varied: VariedRecordings) -> None:
    """The largest value on each device of the fits table, from each run's snapshot replayed
    there (under the settings it ran with)."""
    answers = varied.by_device()
    if not answers:
        return
    name = varied.variation.name
    table = output.Table(f"The largest {name} given that fits, by device (each run replayed there)",
                         ["device", "memory", f"largest {name}", "peak reserved"],
                         right=("memory", "peak reserved"))  # fmt: skip
    for answer in answers:
        largest = "none given" if answer.value is None else answer.value
        if answer.bounded:
            largest += " or more"
        peak = "" if answer.peak_reserved_bytes is None else _bytes(answer.peak_reserved_bytes)
        table.add_row(answer.device.name, output.human_bytes(answer.device.memory_bytes),
                      largest, peak)  # fmt: skip
    output.print_table(table)
    if any(answer.bounded for answer in answers):
        output.note(f"or more: a larger {name} ran out of memory on the recorded device; record "
                    "on a larger --device to know")  # fmt: skip


def _say_applied(done: Recording) -> None:
    """What a ROCm build does differently, set for an AMD device (replay/record/rocm_build.py)."""
    if done.applied:
        device = done.request.device.name
        output.note(f"As a ROCm build on {device}: " + "; ".join(done.applied) + ".")


def render(done: Recording) -> None:
    request = done.request
    ran = shlex.join(request.command)
    output.line(
        f"Recorded {ran} on a virtual {request.device.name} "
        f"({output.human_bytes(request.device.memory_bytes)}) with PyTorch {done.torch_version} "
        f"in {done.wall_s:.1f} s; exit code {done.exit_code}"
    )
    if done.max_memory_reserved == 0 and done.snapshot is None:
        if done.exit_code != 0:
            output.error(f"recorded nothing: the command exited with {done.exit_code} before "
                         "any allocation on the GPU (its own error is above)")  # fmt: skip
        else:
            output.error("recorded nothing: the command made no allocation on the GPU")
        return
    table = output.Table("On the virtual GPU", ["", "bytes"], right=("bytes",))
    table.add_row("peak reserved", _bytes(done.max_memory_reserved))
    table.add_row("peak allocated", _bytes(done.max_memory_allocated))
    table.add_row("allocations", f"{done.allocations:,}")
    table.add_row("out of memory", "yes" if done.out_of_memory else "no")
    output.print_table(table)
    if done.device_reads:
        sites = ", ".join(f"{site} ({n}x)" for site, n in done.device_read_sites.items())
        output.note(
            f"{done.device_reads:,} device values the host could not compute read back as zeros; "
            f"first at: {sites}"
        )
    if done.grad_scaler_steps:
        output.note(
            f"GradScaler: {done.grad_scaler_steps:,} steps taken, their overflow checks read as "
            "no inf. On a GPU a step whose gradients overflow is skipped and allocates no "
            "optimizer state yet (early steps often overflow at the default init_scale of "
            "65536), so a run of a few steps can peak lower there; once its steps are taken, a "
            "run reaches this peak."
        )
    _say_convolutions(done.cudnn_convolutions)
    _say_applied(done)
    output.note("Not seen: " + "; ".join(done.unseen) + ".")
    if done.fits_table:
        render_fits([("torch:settings=recorded", list(done.fits_table))])
    if done.snapshot is None:
        output.note("give -o SNAPSHOT to keep the snapshot (replay, explain and recommend read it)")
    else:
        output.written("snapshot", done.snapshot)
        name = shlex.quote(str(done.snapshot))
        # The release that recorded it replays it: another's allocator can answer differently.
        on = f"--device {request.device.name} --torch {done.torch_version.split('+')[0]}"
        output.note("Next, each device's smallest memory and the fits of both settings:")
        settings = "-r torch:settings=recorded -r torch:expandable_segments=1"
        output.command(f"hipmem replay {name} {settings} {on} --find-capacity")
        if done.out_of_memory:
            output.note("Why it ran out of memory, and which settings avoid it:")
            output.command(f"hipmem explain {name} {on}")


def _say_convolutions(counts: dict[str, int]) -> None:
    """How the stand-in cuDNN answered the convolutions' workspaces, when any ran."""
    if not any(counts.values()):
        return
    output.note(
        f"cuDNN convolution workspaces: {counts.get('measured', 0):,} as the H200 answered, "
        f"{counts.get('from_other_batch_sizes', 0):,} interpolated between measured batch "
        f"sizes, {counts.get('not_measured', 0):,} estimated from the three most alike measured "
        "convolutions (a shape not measured)"
    )


def _bytes(n: int) -> str:
    return f"{output.human_bytes(n)} ({n:,})"


def register(app: typer.Typer) -> None:
    app.command("record", epilog=EPILOG)(record_command)
