"""`hipmem size`: the minimum workspace of each call and of the whole session."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

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
            metavar="CALL",
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
        typer.Option(
            "--top", min=1, metavar="N", help="Show only the N distinct calls that need the most."
        ),
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
    output.summarised_errors([str(failed.error) for failed in result.failed])
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
    # The call last: when it is longer than the width, it runs on past it, whole.
    table = output.Table(title, ["workspace", "bytes", "count", "call"], right=RIGHT)
    for call in shown:
        table.add_row(
            output.human_bytes(call.bytes)
            if call.bytes is not None
            else output.Styled(call.status, "red"),
            "" if call.bytes is None else f"{call.bytes:,}",
            f"{call.count:,}",
            call.call.label,
        )
    output.print_table(table)
    session = f"{output.human_bytes(result.session_bytes)} ({result.session_bytes:,} bytes)"
    if result.failed:  # the session is the largest of the calls answered, not of all calls
        answered = len(result.calls) - len(result.failed)
        output.line(
            f"session {session}: the most any one of the {answered:,} answered calls needs "
            f"({len(result.failed):,} could not be sized)"
        )
    else:
        output.line(f"session {session}: the most any one call needs, as the library reports it")
    versions = ", ".join(f"{name} {version}" for name, version in result.library.versions.items())
    output.note(f"{versions} from {result.library.found_in}")


RIGHT = ("workspace", "bytes", "count")


def _device_line(result: SessionResult) -> str:
    device = result.device
    kind = "virtual " if device.virtual else ""
    return (
        f"{kind}{device.name} ({device.arch.arch_features}, {device.compute_units} CUs, "
        f"{output.human_bytes(device.memory_bytes)})"
    )


EPILOG = """\b
Examples:
  hipmem size -d MI210 rocsolver_dgetrf:m=1024,n=1024 rocsolver_dgetrs:n=1024,nrhs=1
  hipmem size -d MI300X --workload samples/workload.yaml --json
  hipmem size -d MI210 --from-log samples/rocblas-bench.log --top 5

Exit codes: 0 every call answered; 1 a call failed (the library rejected it or
aborted; the others are still answered), or no GPU and no --device, or no libraries;
2 usage (unknown routine, argument, value or device); 130 interrupted.
"""


def register(app: typer.Typer) -> None:
    app.command("size", epilog=EPILOG)(size)
