"""`hipmem size`: the minimum workspace of each call and of the whole session."""

from __future__ import annotations

import json as json_text
from pathlib import Path
from typing import Annotated, Optional

import typer

from hipmem._core.plot_files import check_plot_path

from ..sizing.calls.result import CallResult
from ..sizing.calls.sources import CallSources
from ..sizing.request import SizingRequest, size_request
from ..sizing.rocm.releases import NEWEST
from ..sizing.session import SessionResult
from . import hipblaslt_output, output, sized_calls
from .options import (
    MAX_POINTS_DEFAULT_TEXT,
    CusOption,
    DeviceOption,
    FromLogOption,
    JsonOption,
    MaxPointsOption,
    OfflineOption,
    RocmDirOption,
    StrictOption,
    SweepOption,
    WorkloadOption,
)
from .sweep_output import render_sweeps


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
    rocm: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--rocm",
            help="ROCm release(s) to answer with: 7.2, or 6.4,7.2 to compare them side by side. "
            "Default: $HIPMEM_ROCM, else the local install, else the newest in the cache "
            f"({NEWEST.name}, fetched, when it is empty).",
            show_default=False,
            metavar="RELEASES",
        ),
    ] = None,
    offline: OfflineOption = False,
    json: JsonOption = False,
    top: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            "--top", min=1, metavar="N", help="Show only the N distinct calls that need the most."
        ),
    ] = None,
    sweep: SweepOption = None,
    max_points: MaxPointsOption = MAX_POINTS_DEFAULT_TEXT,
    plot: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--plot",
            help="With sweeps: draw the need against the swept argument to FILE (.png, .svg).",
            metavar="FILE",
            show_default=False,
        ),
    ] = None,
    minimum: Annotated[
        bool,
        typer.Option(
            "--minimum",
            help="Also measure each call's minimum workspace (the least it runs with) and its "
            "optimal (the least with its best kernels), by executing it on the virtual device.",
        ),
    ] = False,
) -> None:
    """Size rocBLAS/rocSOLVER calls with the real libraries, on a real or virtual GPU."""
    if plot is not None:
        check_plot_path(plot)  # before any work: a typo should not cost a sweep
    request = SizingRequest(
        calls=calls or [], from_logs=from_log or [], workloads=workload or [], strict=strict,
        sweeps=sweep or [], max_points=max_points, device=device, compute_units=cus,
        rocm=rocm, rocm_dir=rocm_dir, offline=offline, minimum=minimum,
        sweep_plot=plot is not None,
    )  # fmt: skip
    answer = size_request(request, sized_calls.say())
    matmuls = answer.matmul_reports
    if answer.matmuls.any:
        if answer.matmuls.only:
            if json:
                output.print_json({"hipblaslt": hipblaslt_output.as_json(matmuls)})
            else:
                hipblaslt_output.render(matmuls, top)
            if hipblaslt_output.report_failures(matmuls):
                raise typer.Exit(1)
            return
        if not json:
            hipblaslt_output.render(matmuls, top)
    if answer.swept:
        _render_sweeps(answer.sessions[0], json, top, plot)
        return
    results = answer.sessions
    if len(results) > 1:
        _compare(results, answer.sources, json, top)
        return
    result = results[0]
    if json:
        payload = result.as_dict()
        if top is not None:  # the N largest, largest first; else every call in given order
            payload["calls"] = [r.as_dict() for r in _largest_first(result)[:top]]
        payload["distinct_calls"] = len(result.calls)
        if answer.matmuls.any:
            payload["hipblaslt"] = hipblaslt_output.as_json(matmuls)
        if answer.sources.logs:
            payload["logs"] = [log.as_dict() for log in answer.sources.logs]
        output.print_json(payload)
    else:
        render(result, top)
    warn_unknown_minimums(result)
    _warn_unsatisfiable(result)
    output.summarised_errors([str(failed.error) for failed in result.failed])
    matmuls_failed = answer.matmuls.any and hipblaslt_output.report_failures(matmuls)
    if result.failed or matmuls_failed:
        raise typer.Exit(1)


def _render_sweeps(result: SessionResult, json: bool, top: int | None, plot: Path | None) -> None:
    """Calls with sweeps: the calls' table (each sweep by its largest point), then per sweep
    where the need peaks and changes; `--json` lists every point."""
    if json:
        payload = result.as_dict()
        payload["distinct_calls"] = len(result.calls)
        # One line: a sweep lists every point (100,000 points: 8 MiB), and only the C
        # encoder, which json uses without indentation, writes that in well under a second.
        output.write_exact(json_text.dumps(payload) + "\n")
    else:
        render(result, top)
        render_sweeps(result.sweeps)
    if plot is not None:
        from ..sizing.sweeps.plot import write_sweep_plot  # matplotlib: only when asked for

        write_sweep_plot(plot, result.sweeps, f"Workspace on {_device_line(result)}")
        if not json:
            output.written("plot", plot)
    warn_unknown_minimums(result)
    _warn_unsatisfiable(result)
    for failed in result.failed:
        output.error(str(failed.error))
    if result.failed:
        raise typer.Exit(1)


def _warn_unsatisfiable(result: SessionResult) -> None:
    for big in (r for r in result.calls if not r.fits_device):
        output.warning(
            f"{big.call.label} needs {big.bytes:,} bytes, more than the {result.device.name}'s "
            f"{result.device.memory_bytes:,}: unsatisfiable on that device"
        )


def _largest_first(result: SessionResult) -> list[CallResult]:
    """Distinct calls by workspace, largest first; failed calls last; ties by count."""
    return sorted(result.calls, key=lambda r: (-(r.bytes if r.bytes is not None else -1), -r.count))


def render(result: SessionResult, top: int | None = None) -> None:
    """The terminal view: one row per distinct call, largest first, then the session."""
    shown = _largest_first(result)[:top]
    title = f"Workspace on {_device_line(result)}"
    if len(shown) < len(result.calls):
        title += f": the {len(shown)} largest of {len(result.calls):,} distinct calls"
    measured = result.session_minimum_bytes is not None
    extra = ["minimum", "optimal", "between"] if measured else []
    # The call last: when it is longer than the width, it runs on past it, whole.
    table = output.Table(
        title,
        ["workspace", "bytes", "count", *extra, "call"],
        right=(*RIGHT, "minimum", "optimal"),
    )
    for call in shown:
        table.add_row(
            output.human_bytes(call.bytes)
            if call.bytes is not None
            else output.Styled(call.status, "red"),
            "" if call.bytes is None else f"{call.bytes:,}",
            f"{call.count:,}",
            *(_minimum_cells(call) if measured else ()),
            call.call.label,
        )
    output.print_table(table)
    session = f"{output.human_bytes(result.session_bytes)} ({result.session_bytes:,} bytes)"
    if result.failed:  # the session is the largest of the calls answered, not of all calls
        answered = len(result.calls) - len(result.failed)
        output.line(
            f"session {session}, incomplete: the most any one of the {answered:,} answered "
            f"calls needs ({len(result.failed):,} could not be sized: {_failed_calls(result)})"
        )
    else:
        output.line(f"session {session}: the most any one call needs, as the library reports it")
    if result.session_minimum_bytes is not None:
        output.line(
            f"session minimum {output.human_bytes(result.session_minimum_bytes)} "
            f"({result.session_minimum_bytes:,} bytes): the largest minimum; between a call's "
            "minimum and optimal it runs degraded"
        )
    output.note(_release_text(result))


RIGHT = ("workspace", "bytes", "count")


def _minimum_cells(call: CallResult) -> tuple[output.Cell, output.Cell, output.Cell]:
    """minimum, optimal, and how the call runs between them (or how they were found)."""
    found = call.minimum
    if found is None:
        return ("", "", "")
    if found.method == "unknown" or found.minimum_bytes is None or found.optimal_bytes is None:
        return (output.Styled("unknown", "red"), "", "see below")
    between = found.between_status or ("= query" if found.method == "query" else "same")
    return (f"{found.minimum_bytes:,}", f"{found.optimal_bytes:,}", between)


def warn_unknown_minimums(result: SessionResult) -> None:
    """One line per call whose minimum could not be measured, with the reason."""
    for call in result.calls:
        if call.minimum is not None and call.minimum.method == "unknown":
            output.warning(
                f"{call.call.label}: minimum unknown ({call.minimum.reason}); "
                "counted with its query size"
            )


def _release_text(result: SessionResult) -> str:
    library = result.library
    versions = ", ".join(f"{name} {version}" for name, version in library.versions.items())
    return f"ROCm {library.rocm or '(release not recognised)'}: {versions} from {library.place}"


def _compare(
    results: list[SessionResult], sources: CallSources, json: bool, top: int | None
) -> None:
    """The same calls sized with several releases: side by side, with the change per call."""
    names = [result.library.rocm or "?" for result in results]
    rows = list(zip(*(result.calls for result in results), strict=True))
    if json:
        payload: dict[str, object] = {
            "rocm": names,
            "calls": [_compared_call(row, names) for row in rows],
            # null for a release whose session is incomplete (a call failed: `calls` says which)
            "session_bytes": {
                name: None if result.failed else result.session_bytes
                for name, result in zip(names, results, strict=True)
            },
            "session_incomplete": {
                n: [call.call.label for call in r.failed]
                for n, r in zip(names, results, strict=True)
                if r.failed
            },
            "distinct_calls": len(rows),
            "versions": [result.as_dict() for result in results],
        }
        if sources.logs:
            payload["logs"] = [log.as_dict() for log in sources.logs]
        output.print_json(payload)
    else:
        _render_compared(results, names, rows, top)
    failed = [r for result in results for r in result.failed]
    output.summarised_errors(
        [
            f"ROCm {result.library.rocm}: {call.error}"
            for result in results
            for call in result.failed
        ]
    )
    if failed:
        raise typer.Exit(1)


def _compared_call(row: tuple[CallResult, ...], names: list[str]) -> dict[str, object]:
    sizes = [call.bytes for call in row]
    entry: dict[str, object] = {
        "routine": row[0].call.routine.name,
        "args": row[0].call.args,
        "count": row[0].count,
        "bytes": dict(zip(names, sizes, strict=True)),
        "status": {n: call.status for n, call in zip(names, row, strict=True)},
        "difference_bytes": _difference(sizes),
    }
    return entry


def _difference(sizes: list[int | None]) -> int | None:
    """Last release minus first; None when either could not be sized."""
    return None if sizes[0] is None or sizes[-1] is None else sizes[-1] - sizes[0]


def _render_compared(
    results: list[SessionResult],
    names: list[str],
    rows: list[tuple[CallResult, ...]],
    top: int | None,
) -> None:
    ordered = sorted(rows, key=lambda row: -(row[-1].bytes if row[-1].bytes is not None else -1))
    shown = ordered[:top]
    title = f"Workspace on {_device_line(results[0])}, by ROCm release"
    if len(shown) < len(rows):
        title += f": the {len(shown)} largest of {len(rows):,} distinct calls"
    releases_ = [f"ROCm {name}" for name in names]
    change = f"{names[-1]} − {names[0]}"
    # The call last: when it is longer than the width, it runs on past it, whole.
    table = output.Table(
        title, [*releases_, change, "count", "call"], right=(*releases_, change, "count")
    )
    for row in shown:
        cells: list[output.Cell] = [
            f"{c.bytes:,}" if c.bytes is not None else output.Styled(c.status, "red") for c in row
        ]
        sizes = [call.bytes for call in row]
        table.add_row(
            *cells, _change_text(_difference(sizes)), f"{row[0].count:,}", row[0].call.label
        )
    # A release with a call that failed has no session size: the largest of the calls it
    # answered would read as the session's, and a change against it as real.
    sessions = [None if result.failed else result.session_bytes for result in results]
    table.add_row(
        *(
            f"{result.session_bytes:,}" if size is not None else output.Styled("incomplete", "red")
            for size, result in zip(sessions, results, strict=True)
        ),
        _change_text(_difference(sessions)),
        "",
        output.Styled("session", "bold"),
    )
    output.print_table(table)
    output.note("bytes; session: the most any one call needs, per release")
    for name, result in zip(names, results, strict=True):
        if result.failed:
            output.line(
                f"session of ROCm {name} incomplete: {len(result.failed):,} call"
                f"{'s' if len(result.failed) > 1 else ''} could not be sized: "
                f"{_failed_calls(result)}"
            )
    for result in results:
        output.note(_release_text(result))


def _failed_calls(result: SessionResult, shown: int = 3) -> str:
    """The calls a session could not size, by name (the first few, then how many more)."""
    named = [f"{call.call.label} ({call.status})" for call in result.failed[:shown]]
    more = len(result.failed) - shown
    return ", ".join(named) + (f" and {more:,} more (--json lists them)" if more > 0 else "")


def _change_text(change: int | None) -> str:
    if change is None:
        return ""
    if change == 0:
        return "same"
    sign = "+" if change > 0 else "−"
    return output.whole(f"{sign}{abs(change):,} ({sign}{output.human_bytes(abs(change))})")


def _device_line(result: SessionResult) -> str:
    device = result.device
    kind = "virtual " if device.virtual else ""
    return (
        f"{kind}{device.name} ({device.arch.arch_features}, {device.compute_units} CUs, "
        f"{output.human_bytes(device.memory_bytes)})"
    )


EPILOG = """\b
Examples:
  hipmem size -d MI210 rocsolver_dgetrf:m=1024,n=1024 \\
      rocsolver_dgetrs:n=1024,nrhs=1
  hipmem size -d MI300X --workload samples/workload.yaml --json
  hipmem size -d MI210 --from-log samples/rocblas-bench.log --top 5

Exit codes: 0 every call answered; 1 a call failed (the library rejected it or
aborted; the others are still answered), or no GPU and no --device, or no libraries;
2 usage (unknown routine, argument, value or device); 130 interrupted.

Docs: hipmem docs size
"""


def register(app: typer.Typer) -> None:
    app.command("size", epilog=EPILOG)(size)
