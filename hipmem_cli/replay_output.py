"""`hipmem replay`'s answer on a terminal: the side-by-side table, the notes under it (the
log's anomalies, where the reserved figures come from, the first refusal of each resource)
and where PyTorch's allocator ran on the virtual GPU."""

from __future__ import annotations

from ..replay.engine.program import ReplayProgram
from ..replay.engine.report import LatencyStats, RecordedFigures, ReplayReport
from . import output


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
    f = report.failures[0]
    size, live = output.human_bytes(f.size_bytes), output.human_bytes(f.live_bytes)
    recorded = " (recorded-failed: refused when recorded too)" if f.recorded_failed else ""
    return f"{f.where}: {size} with {live} live{recorded}"


def print_table(reports: list[ReplayReport], recorded: RecordedFigures | None = None) -> None:
    first = ["recorded (PyTorch)"] if recorded is not None else []
    columns = [*first, *(r.resource for r in reports)]
    # One column per resource: too wide, it is shown in blocks of resources; a figure
    # ("4.2 µs / 40.8 µs / 75.1 µs") and its label are never broken over lines.
    table = output.Table(
        "Replay, side by side", ["", *columns], right=tuple(columns), label_columns=1
    )
    rows: list[tuple[str, list[str]]] = [
        ("backend / engine", [f"{r.backend} / {r.engine}" for r in reports]),
        (
            "threads / streams",
            [f"{r.threads} ({r.thread_count}) / {r.stream_count}" for r in reports],
        ),
        ("outcome", [r.outcome for r in reports]),
        ("wall time", [_ns(r.wall_ns) for r in reports]),
        ("events/s", [f"{r.events_per_s:,.0f}" for r in reports]),
        *_pass_rows(reports),
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
        ("refused allocations", [f"{r.failure_count:,}" for r in reports]),
        ("returned at end", [_bytes(r.returned_at_end_bytes) for r in reports]),
    ]
    recorded_cells = _recorded_cells(recorded) if recorded is not None else {}
    for label, cells in rows:
        if recorded is not None:
            cells = [recorded_cells.get(label, ""), *cells]
        table.add_row(output.whole(label), *map(output.whole, cells))
    output.print_table(table)


def print_virtual_devices(reports: list[ReplayReport]) -> None:
    """Where PyTorch's allocator ran, said plainly, once per device and allocator."""
    places: dict[tuple[str, str], list[str]] = {}
    for report in reports:
        if report.device is not None:
            key = (report.device, report.allocator_source or "")
            places.setdefault(key, []).append(report.resource)
    for (device, source), names in places.items():
        whom = "" if len(places) == 1 else f"{', '.join(names)}: "
        output.line(f"{whom}{device}; the allocator is {source}.")


def _pass_rows(reports: list[ReplayReport]) -> list[tuple[str, list[str]]]:
    """With --repeats, events/s over the passes: how steady the figure above is. A machine that
    slows a core for a second (other tenants of a shared host) shows here, in the spread."""
    if all(len(r.pass_wall_ns) <= 1 for r in reports):
        return []
    spreads = [r.pass_spread() for r in reports]
    return [
        (
            "events/s of passes: min / median / max",
            [
                "n/a"
                if s is None
                else f"{_rate(s['min'])} / {_rate(s['median'])} / {_rate(s['max'])}"
                for s in spreads
            ],
        ),
        (
            "spread of passes (max / min)",
            [
                "n/a" if s is None else f"{s['spread']:.2f}x ({len(r.pass_wall_ns)} passes)"
                for r, s in zip(reports, spreads, strict=True)
            ],
        ),
    ]


def _rate(events_per_s: float) -> str:
    if events_per_s >= 1e6:
        return f"{events_per_s / 1e6:.2f}M"
    if events_per_s >= 1e3:
        return f"{events_per_s / 1e3:.1f}k"
    return f"{events_per_s:.0f}"


def _recorded_cells(recorded: RecordedFigures) -> dict[str, str]:
    """The recording's own figures, on the rows that have them."""
    fragmentation = recorded.fragmentation
    return {
        "backend / engine": "PyTorch's allocator",
        "outcome": "recorded",
        "peak requested": _bytes(recorded.peak_requested_bytes),
        "peak reserved": _bytes(recorded.peak_reserved_bytes),
        "fragmentation": "n/a" if fragmentation is None else f"{fragmentation:.3f}",
        "refused allocations": f"{recorded.failure_count:,}",
    }


def print_notes(program: ReplayProgram, reports: list[ReplayReport]) -> None:
    a = program.anomalies
    output.line(
        f"{program.log_events:,} log events, {program.op_count:,} allocator calls; "
        f"{a.zero_byte_allocations:,} zero-byte allocations, {a.free_unknown_pointer:,} frees "
        f"of unknown pointers (skipped), {a.allocate_live_pointer:,} allocations at live "
        f"pointers (replaced), {a.allocate_failure - a.recorded_failed:,} logged failures (not "
        f"replayed), {a.live_at_end_count:,} live at end (returned at the end)."
    )
    if a.recorded_failed:
        output.line(
            f"{a.recorded_failed:,} requests ran out of memory when recorded: each is replayed as "
            "the request it was (recorded-failed), and returned at once when served."
        )
    for example in a.examples:
        output.line(f"  {example}")
    sources = sorted({r.reserved_source for r in reports})
    output.line(f"Reserved bytes from: {'; '.join(sources)}.")
    refused = [r for r in reports if r.failure_count]
    for r in refused:  # below the table: a path:line is too long for a cell at 80 columns
        output.line(f"{r.resource} first refused {_first_failure(r)}")
    if refused:
        names = ", ".join(f"{r.resource} ({r.failure_count:,})" for r in refused)
        output.line(f"Refused allocations the log made: {names}; exit code 1.")
