"""`hipmem size`: the minimum workspace of each call and of the whole session."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.table import Table

from hipmem_cli import output
from hipmem_cli.call_sources import CallSources, gather_calls
from hipmem_cli.options import (
    CusOption,
    DeviceOption,
    FromLogOption,
    JsonOption,
    RocmDirOption,
    StrictOption,
    WorkloadOption,
)
from sizing.session import CallResult, SessionResult, size_calls


def size(
    calls: Annotated[
        Optional[list[str]],  # noqa: UP045 - typer reads annotations at runtime
        typer.Argument(
            help="ROUTINE[:ARG=VALUE,...], e.g. rocsolver_dgetrf:m=1024,n=1024",
            show_default=False,
        ),
    ] = None,
    from_log: FromLogOption = None,
    workload: WorkloadOption = None,
    strict: StrictOption = False,
    device: DeviceOption = None,
    cus: CusOption = None,
    rocm_dir: RocmDirOption = None,
    json: JsonOption = False,
    top: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--top", min=1, help="Show only the N distinct calls that need the most."),
    ] = None,
) -> None:
    """Size rocBLAS/rocSOLVER calls with the real libraries, on a real or virtual GPU."""
    sources = CallSources(calls or [], from_log or [], workload or [], strict)
    parsed = gather_calls(sources)
    with output.progress("sizing") as report:
        result = size_calls(parsed, device, compute_units=cus, rocm_dir=rocm_dir, progress=report)
    if json:
        payload = result.as_dict()
        if top is not None:  # the N largest, largest first; else every call in given order
            payload["calls"] = [r.as_dict() for r in _largest_first(result)[:top]]
        payload["distinct_calls"] = len(result.calls)
        if sources.logs:
            payload["logs"] = [log.as_dict() for log in sources.logs]
        output.print_json(payload)
    else:
        render(result, top)
    for big in (r for r in result.calls if not r.fits_device):
        output.warning(
            f"{big.call.label} needs {big.bytes:,} bytes, more than the {result.device.name}'s "
            f"{result.device.memory_bytes:,}: unsatisfiable on that device"
        )
    for failed in result.failed:
        output.error(str(failed.error))
    if result.failed:
        raise typer.Exit(1)


def _largest_first(result: SessionResult) -> list[CallResult]:
    """Distinct calls by workspace, largest first; failed calls last; ties by count."""
    return sorted(result.calls, key=lambda r: (-(r.bytes if r.bytes is not None else -1), -r.count))


def render(result: SessionResult, top: int | None = None) -> None:
    """The terminal view: one row per distinct call, largest first, then the session."""
    shown = _largest_first(result)[:top]
    title = f"Workspace on {_device_line(result)}"
    if len(shown) < len(result.calls):
        title += f": the {len(shown)} largest of {len(result.calls):,} distinct calls"
    table = Table(title=title, title_justify="left")
    table.add_column("call", overflow="fold")
    table.add_column("workspace", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("count", justify="right")
    for call in shown:
        size_text = (
            output.human_bytes(call.bytes)
            if call.bytes is not None
            else f"[red]{call.status}[/red]"
        )
        table.add_row(
            call.call.label,
            size_text,
            "" if call.bytes is None else f"{call.bytes:,}",
            str(call.count),
        )
    output.stdout.print(table)
    versions = ", ".join(f"{name} {version}" for name, version in result.library.versions.items())
    output.stdout.print(
        f"[bold]session[/bold] {output.human_bytes(result.session_bytes)} "
        f"({result.session_bytes:,} bytes): the most any one call needs, as the library reports it"
    )
    output.stdout.print(f"[dim]{versions} from {result.library.found_in}[/dim]", highlight=False)


def _device_line(result: SessionResult) -> str:
    device = result.device
    kind = "virtual " if device.virtual else ""
    return (
        f"{kind}{device.name} ({device.arch.arch_features}, {device.compute_units} CUs, "
        f"{output.human_bytes(device.memory_bytes)})"
    )


def register(app: typer.Typer) -> None:
    app.command("size")(size)
