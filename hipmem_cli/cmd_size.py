"""`hipmem size`: the minimum workspace of each call and of the whole session."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.measure import Measurement
from rich.table import Table

from hipmem_cli import hipblaslt_calls, output
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
from hipmem_cli.rocm_choice import in_release, releases
from sizing.catalog import load_catalog
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
    rocm: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--rocm",
            help="ROCm release(s) to answer with: 7.2, or 6.4,7.2 to compare them side by side. "
            "Default: $HIPMEM_ROCM, else the local install, else the newest in the cache.",
            show_default=False,
        ),
    ] = None,
    json: JsonOption = False,
    top: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--top", min=1, help="Show only the N distinct calls that need the most."),
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
    chosen = releases(rocm, rocm_dir)
    found = hipblaslt_calls.gather(calls, from_log, workload, strict)
    calls, from_log, workload = found.calls, found.from_log, found.workload
    matmul_specs = found.specs or (["(from logs and workloads)"] if found.logged else [])
    if found.any:
        matmuls = hipblaslt_calls.size_specs(found.specs, chosen, device, cus, found.logged)
        if found.only:
            if json:
                output.print_json({"hipblaslt": hipblaslt_calls.as_json(matmuls)})
            else:
                hipblaslt_calls.render(matmuls, top)
            if hipblaslt_calls.report_failures(matmuls):
                raise typer.Exit(1)
            return
        if not json:
            hipblaslt_calls.render(matmuls, top)
    sources = CallSources(calls or [], from_log or [], workload or [], strict)
    parsed = gather_calls(sources, load_catalog(chosen[0].rocm))
    results = []
    for libraries in chosen:
        with output.progress(f"sizing with ROCm {libraries.rocm}") as report:
            results.append(
                size_calls(
                    in_release(parsed, libraries),
                    device,
                    compute_units=cus,
                    progress=report,
                    libraries=libraries,
                    minimum=minimum,
                )
            )
    if len(results) > 1:
        _compare(results, sources, json, top)
        return
    result = results[0]
    if json:
        payload = result.as_dict()
        if top is not None:  # the N largest, largest first; else every call in given order
            payload["calls"] = [r.as_dict() for r in _largest_first(result)[:top]]
        payload["distinct_calls"] = len(result.calls)
        if matmul_specs:
            payload["hipblaslt"] = hipblaslt_calls.as_json(matmuls)
        if sources.logs:
            payload["logs"] = [log.as_dict() for log in sources.logs]
        output.print_json(payload)
    else:
        render(result, top)
    warn_unknown_minimums(result)
    for big in (r for r in result.calls if not r.fits_device):
        output.warning(
            f"{big.call.label} needs {big.bytes:,} bytes, more than the {result.device.name}'s "
            f"{result.device.memory_bytes:,}: unsatisfiable on that device"
        )
    for failed in result.failed:
        output.error(str(failed.error))
    matmuls_failed = bool(matmul_specs) and hipblaslt_calls.report_failures(matmuls)
    if result.failed or matmuls_failed:
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
    measured = result.session_minimum_bytes is not None
    if measured:
        for name in ("minimum", "optimal", "between"):
            table.add_column(name, justify="left" if name == "between" else "right")
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
            *(_minimum_cells(call) if measured else ()),
        )
    if measured:
        _print_unfolded(table)
    else:
        output.stdout.print(table)
    output.stdout.print(
        f"[bold]session[/bold] {output.human_bytes(result.session_bytes)} "
        f"({result.session_bytes:,} bytes): the most any one call needs, as the library reports it"
    )
    if result.session_minimum_bytes is not None:
        output.stdout.print(
            f"[bold]session minimum[/bold] {output.human_bytes(result.session_minimum_bytes)} "
            f"({result.session_minimum_bytes:,} bytes): the largest minimum; between a call's "
            "minimum and optimal it runs degraded"
        )
    output.stdout.print(f"[dim]{_release_text(result)}[/dim]", highlight=False)


def _print_unfolded(table: Table) -> None:
    """As wide as the cells need: a call spec or a number is never folded or cut."""
    unbounded = output.stdout.options.update(max_width=1 << 16)
    needed = Measurement.get(output.stdout, unbounded, table).maximum
    width = output.stdout.width
    output.stdout.width = max(needed, width)
    try:
        output.stdout.print(table)
    finally:
        output.stdout.width = width


def _minimum_cells(call: CallResult) -> tuple[str, str, str]:
    """minimum, optimal, and how the call runs between them (or how they were found)."""
    found = call.minimum
    if found is None:
        return ("", "", "")
    if found.method == "unknown" or found.minimum_bytes is None or found.optimal_bytes is None:
        return ("[red]unknown[/red]", "", "see below")
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
    return f"ROCm {library.rocm or '(release not recognised)'}: {versions} from {library.found_in}"


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
            "session_bytes": {n: r.session_bytes for n, r in zip(names, results, strict=True)},
            "distinct_calls": len(rows),
            "versions": [result.as_dict() for result in results],
        }
        if sources.logs:
            payload["logs"] = [log.as_dict() for log in sources.logs]
        output.print_json(payload)
    else:
        _render_compared(results, names, rows, top)
    failed = [r for result in results for r in result.failed]
    for result in results:
        for call in result.failed:
            output.error(f"ROCm {result.library.rocm}: {call.error}")
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
    table = Table(title=title, title_justify="left")
    table.add_column("call", overflow="fold")
    for name in names:
        table.add_column(f"ROCm {name}", justify="right")
    table.add_column(f"{names[-1]} − {names[0]}", justify="right")
    table.add_column("count", justify="right")
    for row in shown:
        cells = [f"{c.bytes:,}" if c.bytes is not None else f"[red]{c.status}[/red]" for c in row]
        sizes = [call.bytes for call in row]
        table.add_row(
            row[0].call.label, *cells, _change_text(_difference(sizes)), str(row[0].count)
        )
    sessions = [result.session_bytes for result in results]
    table.add_section()
    table.add_row(
        "[bold]session[/bold]",
        *(f"{size:,}" for size in sessions),
        _change_text(_difference(list(sessions))),
        "",
    )
    # As wide as the calls need: a call spec is never folded (the terminal may wrap the line).
    unbounded = output.stdout.options.update(max_width=1 << 16)
    needed = Measurement.get(output.stdout, unbounded, table).maximum
    width = output.stdout.width
    output.stdout.width = max(needed, width)
    try:
        output.stdout.print(table)
    finally:
        output.stdout.width = width
    output.stdout.print("[dim]bytes; session: the most any one call needs, per release[/dim]")
    for result in results:
        output.stdout.print(f"[dim]{_release_text(result)}[/dim]", highlight=False)


def _change_text(change: int | None) -> str:
    if change is None:
        return ""
    if change == 0:
        return "same"
    sign = "+" if change > 0 else "−"
    return f"{sign}{abs(change):,} ({sign}{output.human_bytes(abs(change))})"


def _device_line(result: SessionResult) -> str:
    device = result.device
    kind = "virtual " if device.virtual else ""
    return (
        f"{kind}{device.name} ({device.arch.arch_features}, {device.compute_units} CUs, "
        f"{output.human_bytes(device.memory_bytes)})"
    )


def register(app: typer.Typer) -> None:
    app.command("size")(size)
