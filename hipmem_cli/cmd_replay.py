"""`hipmem replay LOG --resource SPEC ...`: replay a log through real memory resources."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from hipmem_cli import output
from hipmem_cli.cmd_log import skipped_rows_json, warn_skipped_rows
from hipmem_cli.options import JsonOption
from replay.backends import resolve_backend
from replay.capacity import CapacityResult, find_capacity
from replay.engine import ReplayOptions, replay
from replay.log_loader import load_log
from replay.log_plot import check_plot_path
from replay.plot import write_plot
from replay.program import ReplayProgram, build_program
from replay.report import LatencyStats, RecordedFigures, ReplayReport, recorded_figures
from replay.resources import STREAM_ORDERED_KINDS, ResourceSpec, parse_spec

_RESOURCE_HELP = (
    "Resource spec, repeatable: cuda|hip, managed[:prefetch=1,advise=preferred_location], "
    "async[:release_threshold=4GiB,pool=default], pool[:initial=1GiB,maximum=8GiB,upstream=cuda], "
    "arena[:size=8GiB], binning[:min_exp=18,max_exp=22], fixed[:block=1MiB], host[:pinned=1]; "
    "any takes limit=BYTES."
)


# What replay.plot writes (matplotlib picks the format by suffix; none means .png).
_PLOT_SUFFIXES = (".png", ".svg", ".pdf", "")


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_command)


def replay_command(
    logs: Annotated[
        list[Path], typer.Argument(help="RMM/hipMM allocation log(s), .csv or .csv.gz.")
    ],
    resource: Annotated[list[str], typer.Option("--resource", "-r", help=_RESOURCE_HELP)],
    backend: Annotated[str, typer.Option(help="hip, cuda, host or auto.")] = "auto",
    threads: Annotated[
        str, typer.Option(help="logged: one replay thread per logged thread; single: one.")
    ] = "logged",
    streams: Annotated[
        str,
        typer.Option(help="logged: each logged stream on its own stream; default: all on one."),
    ] = "logged",
    on_failure: Annotated[
        str, typer.Option("--on-failure", help="skip (go on, as production would) or stop.")
    ] = "skip",
    repeats: Annotated[
        int, typer.Option(help="Passes per resource; events/s is the best pass.", min=1)
    ] = 1,
    plot: Annotated[
        Optional[Path],  # noqa: UP045 - typer reads the annotation at runtime on Python 3.10
        typer.Option(help="Write reserved vs requested bytes over the replay to this image."),
    ] = None,
    capacity: Annotated[
        bool,
        typer.Option("--find-capacity", help="Bisect the smallest pool/limit with no failure."),
    ] = False,
    confirm_runs: Annotated[
        int,
        typer.Option(
            "--confirm-runs",
            help="With --find-capacity: replays the size found must pass again.",
            min=0,
        ),
    ] = 2,
    json_out: JsonOption = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Any row that cannot be read is an error (exit 1).")
    ] = False,
) -> None:
    """Replay allocation logs through real GPU memory resources, side by side."""
    specs = [parse_spec(text) for text in resource]  # bad specs fail before any work (exit 2)
    if plot is not None:
        check_plot_path(plot, suffixes=_PLOT_SUFFIXES)
    options = ReplayOptions(
        backend=backend,
        threads=threads,
        streams=streams,
        on_failure=on_failure,
        repeats=repeats,
        plot_samples=2000 if plot else 0,
    )
    options.check()
    for spec in specs:  # a missing GPU or library is said before the log is read
        resolve_backend(options.backend, spec, options.device)
    with output.progress("loading log", transfer=True) as bar:
        log = load_log(logs, strict=strict, progress=bar)
    warn_skipped_rows(log)
    program = build_program(log)
    if capacity:
        _find_capacities(log, program, specs, options, confirm_runs, json_out)
        return
    reports: list[ReplayReport] = []
    with output.progress("replaying") as bar:
        for done, spec in enumerate(specs):
            bar(done, len(specs), spec.label)
            reports.append(replay(log, spec, options, program=program))
    if plot:
        write_plot(plot, program, reports)
    recorded = recorded_figures(log, program.peak_requested_bytes)
    if json_out:
        payload: dict[str, object] = {"sources": log.sources}
        payload["skipped_rows"] = skipped_rows_json(log)
        if recorded is not None:
            payload["recorded"] = recorded.as_dict()
        payload["resources"] = [r.as_dict() for r in reports]
        output.print_json(payload)
        return
    output.stdout.print(_table(reports, recorded))
    _print_notes(program, reports, plot)


def _find_capacities(
    log: object,
    program: ReplayProgram,
    specs: list[ResourceSpec],
    options: ReplayOptions,
    confirm_runs: int,
    json_out: bool,
) -> None:
    results: list[CapacityResult] = []
    with output.progress("finding capacity") as bar:
        for spec in specs:
            found = find_capacity(
                log,  # type: ignore[arg-type]
                spec,
                options,
                program=program,
                confirm_runs=confirm_runs,
                progress=bar,
            )
            results.append(found)
    if json_out:
        output.print_json(
            {"skipped_rows": skipped_rows_json(log), "capacities": [r.as_dict() for r in results]}  # type: ignore[arg-type]
        )
        return
    table = Table(title="Smallest size that replays the log with no failure")
    for column in (
        "resource",
        "sized",
        "capacity",
        "peak requested",
        "capacity / peak",
        "probes",
        "confirmed",
        "use",
    ):
        table.add_column(column, justify="left" if column in ("resource", "use") else "right")
    for r in results:
        table.add_row(
            r.resource,
            r.sized_option,
            _bytes(r.capacity_bytes),
            _bytes(r.peak_requested_bytes),
            f"{r.capacity_bytes / max(r.peak_requested_bytes, 1):.3f}",
            str(len(r.probes)),
            f"{r.confirm_runs}x more",
            r.sized_spec,
        )
    output.stdout.print(table)
    several = len(program.streams) > 1 or (options.threads == "logged" and len(program.threads) > 1)
    if several and any(spec.kind in STREAM_ORDERED_KINDS for spec in specs):
        output.stdout.print(
            "This log has several streams or threads: stream-ordered pools (RMM's pools, "
            "async) pick free blocks across streams in an order that can change from run to "
            "run, so a size near the edge can pass and later fail. Each size found passed "
            f"{1 + confirm_runs} replays in a row; add headroom, or raise --confirm-runs.",
            highlight=False,
        )


def _bytes(n_bytes: int | None) -> str:
    if n_bytes is None:
        return "n/a"
    return f"{output.human_bytes(n_bytes)} ({n_bytes:,})"


def _ns(n: float) -> str:
    if n < 1_000:
        return f"{n:.0f} ns"
    if n < 1_000_000:
        return f"{n / 1_000:.1f} µs"
    return f"{n / 1_000_000:.1f} ms"


def _latency(stats: LatencyStats | None) -> str:
    if stats is None:
        return "n/a"
    return f"{_ns(stats.p50_ns)} / {_ns(stats.p99_ns)} / {_ns(stats.max_ns)}"


def _first_failure(report: ReplayReport) -> str:
    if not report.failures:
        return "-"
    f = report.failures[0]
    size, live = output.human_bytes(f.size_bytes), output.human_bytes(f.live_bytes)
    return f"{f.where}: {size} with {live} live"


def _table(reports: list[ReplayReport], recorded: RecordedFigures | None = None) -> Table:
    table = Table(title="Replay, side by side")
    table.add_column("")
    if recorded is not None:
        table.add_column("recorded (PyTorch)", justify="right")
    for report in reports:
        table.add_column(report.resource, justify="right")
    rows: list[tuple[str, list[str]]] = [
        ("backend / engine", [f"{r.backend} / {r.engine}" for r in reports]),
        (
            "threads / streams",
            [f"{r.threads} ({r.thread_count}) / {r.stream_count}" for r in reports],
        ),
        ("outcome", [r.outcome for r in reports]),
        ("wall time", [_ns(r.wall_ns) for r in reports]),
        ("events/s", [f"{r.events_per_s:,.0f}" for r in reports]),
        (
            "time in allocator calls",
            [_ns(r.allocator_ns) if r.allocator_ns else "n/a" for r in reports],
        ),
        ("alloc p50 / p99 / max", [_latency(r.alloc_latency) for r in reports]),
        ("free p50 / p99 / max", [_latency(r.free_latency) for r in reports]),
        ("peak requested", [_bytes(r.peak_requested_bytes) for r in reports]),
        ("peak reserved", [_bytes(r.peak_reserved_bytes) for r in reports]),
        (
            "fragmentation",
            ["n/a" if r.fragmentation is None else f"{r.fragmentation:.3f}" for r in reports],
        ),
        ("failures", [str(r.failure_count) for r in reports]),
        ("first failure", [_first_failure(r) for r in reports]),
        ("returned at end", [_bytes(r.returned_at_end_bytes) for r in reports]),
    ]
    recorded_cells = _recorded_cells(recorded) if recorded is not None else {}
    for label, cells in rows:
        if recorded is not None:
            cells = [recorded_cells.get(label, ""), *cells]
        table.add_row(label, *cells)
    return table


def _recorded_cells(recorded: RecordedFigures) -> dict[str, str]:
    """The recording's own figures, on the rows that have them."""
    fragmentation = recorded.fragmentation
    return {
        "backend / engine": "PyTorch's allocator",
        "outcome": "recorded",
        "peak requested": _bytes(recorded.peak_requested_bytes),
        "peak reserved": _bytes(recorded.peak_reserved_bytes),
        "fragmentation": "n/a" if fragmentation is None else f"{fragmentation:.3f}",
        "failures": str(recorded.failure_count),
    }


def _print_notes(program: ReplayProgram, reports: list[ReplayReport], plot: Path | None) -> None:
    a = program.anomalies
    output.stdout.print(
        f"{program.log_events:,} log events, {program.op_count:,} allocator calls; "
        f"{a.zero_byte_allocations} zero-byte allocations, {a.free_unknown_pointer} frees of "
        f"unknown pointers (skipped), {a.allocate_live_pointer} allocations at live pointers "
        f"(replaced), {a.allocate_failure} logged failures (not replayed), "
        f"{a.live_at_end_count} live at end (returned at the end).",
        highlight=False,
    )
    for example in a.examples:
        output.stdout.print(f"  {example}", highlight=False, markup=False)
    sources = sorted({r.reserved_source for r in reports})
    output.stdout.print(f"Reserved bytes from: {'; '.join(sources)}.", highlight=False)
    if plot:
        output.stdout.print(f"Plot written to {plot}", highlight=False, markup=False)
