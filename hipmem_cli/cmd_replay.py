"""`hipmem replay LOG --resource SPEC ...`: replay a log through real memory resources."""

from __future__ import annotations

import contextlib
import dataclasses
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from hipmem._core.byte_sizes import parse_bytes

from ..replay.capacity.fits import Fit, fits
from ..replay.capacity.search import CapacityResult, NoCapacityFound, find_capacity
from ..replay.engine.backends import resolve_backend
from ..replay.engine.program import ReplayProgram, build_program
from ..replay.engine.report import LatencyStats, RecordedFigures, ReplayReport, recorded_figures
from ..replay.engine.resources import STREAM_ORDERED_KINDS, ResourceSpec, parse_spec
from ..replay.engine.run import ReplayOptions, replay
from ..replay.errors import ReplayUsageError
from ..replay.logs.events import AllocationLog
from ..replay.logs.loader import load_log
from ..replay.pictures.plot import write_plot
from ..replay.rmm import fetch as rmm_fetch
from ..replay.rmm.virtual import device_text
from . import output, virtual_capacity_output
from .backend_check import check_backends
from .cmd_log import skipped_rows_json, warn_skipped_rows
from .html_output import captured, check_html_option, write_html
from .options import (
    DeviceMemoryOption,
    HtmlOption,
    JsonOption,
    PlotOption,
    RmmVersionsOption,
    TorchVersionsOption,
    VirtualDeviceOption,
    check_plot_option,
)
from .torch_releases import replay_spec, say_recording_release, split_releases

EPILOG = """\b
Resource specs (--resource, repeatable;
any takes limit=BYTES):
  cuda | hip
  managed[:prefetch=1,advise=preferred_location]
  async[:release_threshold=4GiB,pool=default]
  pool[:initial=1GiB,maximum=8GiB,upstream=cuda]
  arena[:size=8GiB]
  binning[:min_exp=18,max_exp=22]
  fixed[:block=1MiB]
  host[:pinned=1]
  torch[:settings=recorded,expandable_segments=1]
  torch[:limit=BYTES,settings=expandable_segments:True,max_split_size_mb:64]

\b
With no GPU, torch resources replay PyTorch's own allocator on a virtual GPU
(--backend virtual; `hipmem torch fetch` gets the allocator once), and pool,
arena, binning, fixed and cuda replay RMM's own code there (`hipmem rmm fetch`
gets it once):
  hipmem replay run.pickle -r torch:settings=recorded --device MI300X
  hipmem replay serve.csv.gz -r pool -r arena --device MI300X --rmm 24.12,25.4
  hipmem replay run.pickle -r torch:settings=recorded \\
      -r torch:expandable_segments=1 --device MI300X --find-capacity

\b
Examples:
  hipmem replay samples/serve-first-2000.csv.gz -r pool -r async -r cuda
  hipmem replay samples/serve-first-2000.csv.gz -r host:limit=600MiB \\
      --plot replay.png
  hipmem replay samples/serve-first-2000.csv.gz -r pool:initial=0 \\
      --find-capacity

Exit codes: 0 every allocation the log made was granted (with --find-capacity: a size was
found for every resource); 1 a resource refused an allocation the log did not record as
failed (whatever --on-failure says), or no size was found; 2 usage; 130 interrupted.

Docs: docs/replay.md
"""


class Backend(str, Enum):
    auto = "auto"
    cuda = "cuda"
    hip = "hip"
    host = "host"
    virtual = "virtual"


class Threads(str, Enum):
    logged = "logged"
    single = "single"


class Streams(str, Enum):
    logged = "logged"
    default = "default"


class OnFailure(str, Enum):
    skip = "skip"
    stop = "stop"


def register(app: typer.Typer) -> None:
    app.command("replay", epilog=EPILOG)(replay_command)


def replay_command(
    logs: Annotated[
        list[Path],
        typer.Argument(
            help="RMM/hipMM allocation log(s) (.csv, .csv.gz) or PyTorch memory snapshot(s) "
            "(.pickle, .pickle.gz).",
            metavar="LOG",
        ),
    ],
    resource: Annotated[
        list[str],
        typer.Option(
            "--resource", "-r", help="Resource to replay through (specs below).", metavar="SPEC"
        ),
    ],
    backend: Annotated[
        Backend,
        typer.Option(
            help="Where to allocate; auto: the GPU there is, or for torch resources with no "
            "GPU, the virtual GPU."
        ),
    ] = Backend.auto,
    device: VirtualDeviceOption = None,
    device_memory: DeviceMemoryOption = None,
    torch: TorchVersionsOption = None,
    rmm: RmmVersionsOption = None,
    threads: Annotated[
        Threads, typer.Option(help="logged: one replay thread per logged thread; single: one.")
    ] = Threads.logged,
    streams: Annotated[
        Streams,
        typer.Option(help="logged: each logged stream on its own stream; default: all on one."),
    ] = Streams.logged,
    on_failure: Annotated[
        OnFailure,
        typer.Option("--on-failure", help="skip (go on, as production would) or stop."),
    ] = OnFailure.skip,
    repeats: Annotated[
        int,
        typer.Option(
            help="Passes per resource; events/s is the best pass, and the table adds every "
            "pass's min / median / max. With N > 1, one more pass runs first that times each "
            "call (latencies), apart from the N.",
            min=1,
            metavar="N",
        ),
    ] = 1,
    plot: PlotOption = None,
    html: HtmlOption = None,
    capacity: Annotated[
        bool,
        typer.Option("--find-capacity", help="Bisect the smallest pool/limit with no failure."),
    ] = False,
    confirm_runs: Annotated[
        Optional[int],  # noqa: UP045 - typer reads the annotation at runtime on Python 3.10
        typer.Option(
            "--confirm-runs",
            help="With --find-capacity: replays the size found must pass again. [default: 2]",
            min=0,
            metavar="N",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Any row that cannot be read is an error (exit 1).")
    ] = False,
) -> None:
    """Replay allocation logs through real GPU memory resources, side by side."""
    if confirm_runs is not None and not capacity:
        raise ReplayUsageError("--confirm-runs counts replays of --find-capacity: add it")
    if plot is not None and capacity:
        raise ReplayUsageError("--plot draws a replay, not a --find-capacity search: drop one")
    check_plot_option(plot)
    check_html_option(html)
    specs = [parse_spec(text) for text in resource]  # bad specs fail before any work (exit 2)
    releases = split_releases(torch, capacity)
    rmm_releases: list[str | None] = [n.strip() for n in (rmm or "").split(",") if n.strip()]
    if len(rmm_releases) > 1 and capacity:
        raise ReplayUsageError("--find-capacity searches with one RMM release: give one --rmm")
    rmm_releases = rmm_releases or [None]
    options = ReplayOptions(
        backend=backend.value,
        threads=threads.value,
        streams=streams.value,
        on_failure=on_failure.value,
        repeats=repeats,
        plot_samples=_HTML_SAMPLES if html else 2000 if plot else 0,
        device_name=device,
        device_memory_bytes=None
        if device_memory is None
        else parse_bytes(device_memory, name="--device-memory"),
        torch_version=releases[0],
        rmm_version=rmm_releases[0],
    )
    options.check()
    virtual = check_backends(specs, options, device, device_memory, releases[0], rmm_releases)
    for other in releases[1:]:  # each release's allocator located and built before the log
        check_backends(specs, dataclasses.replace(options, torch_version=other), device,
                       device_memory, other)  # fmt: skip
    with output.progress("loading", transfer=True) as bar:
        log = load_log(logs, strict=strict, progress=bar)
    warn_skipped_rows(log)
    program = build_program(log)
    kept = captured() if html else contextlib.nullcontext(output.Captured())
    if capacity:
        confirm = 2 if confirm_runs is None else confirm_runs
        with kept as printed:
            every = _find_capacities(log, program, specs, options, confirm, json_out, virtual)
        if html:  # the search replays many sizes: the page draws the log's requested bytes
            _write_page(html, log, program, [], {}, printed)
        if not every:
            raise typer.Exit(1)
        return
    reports: list[ReplayReport] = []
    with output.progress("replaying") as bar:
        for done, spec in enumerate(specs):
            bar(done, len(specs), spec.label)
            if len(rmm_releases) > 1 and spec.kind != "torch":
                reports += _rmm_side_by_side(log, spec, options, program, rmm_releases)
            else:
                reports += replay_spec(log, spec, options, program, releases, virtual)
    limits = {s.label: s.limit_bytes or s.option_bytes("maximum") for s in specs}
    if plot:
        write_plot(plot, program, reports, log.sources, limits)
    recorded = recorded_figures(log, program.peak_requested_bytes)
    with kept as printed:
        if json_out:
            payload: dict[str, object] = {"sources": log.sources}
            payload["skipped_rows"] = skipped_rows_json(log)
            if recorded is not None:
                payload["recorded"] = recorded.as_dict()
            payload["resources"] = [r.as_dict() for r in reports]
            output.print_json(payload)
        else:
            _print_table(reports, recorded)
            _print_notes(program, reports)
            _print_virtual_devices(reports)
            say_recording_release(torch, virtual)
    if plot:
        output.written("plot", plot)
    if html:
        _write_page(html, log, program, reports, limits, printed)
    if any(r.failure_count for r in reports):
        raise typer.Exit(1)


def _rmm_side_by_side(
    log: AllocationLog,
    spec: ResourceSpec,
    options: ReplayOptions,
    program: ReplayProgram,
    releases: list[str | None],
) -> list[ReplayReport]:
    """`--rmm 24.12,25.4`: one report per RMM release, each named by it."""
    reports = []
    for release in releases:
        chosen = dataclasses.replace(options, rmm_version=release)
        report = replay(log, spec, chosen, program=program)
        reports.append(dataclasses.replace(report, resource=f"{spec.label} ({report.engine})"))
    return reports


_HTML_SAMPLES = 10_000  # reserved-bytes samples of a replay drawn on a page (zoomable)


def _write_page(
    path: Path,
    log: AllocationLog,
    program: ReplayProgram,
    reports: list[ReplayReport],
    limits: dict[str, int | None],
    printed: output.Captured,
) -> None:
    from ..replay.pictures import html_timeline as page

    names = ", ".join(Path(s).name for s in log.sources[:3])
    names += " ..." if len(log.sources) > 3 else ""
    title = f"hipmem replay: {names} ({program.log_events:,} events)"
    shown = [(r.resource, r) for r in reports]
    figure = page.replay_figure(log, program, shown, limits, "Requested and reserved bytes")
    headline = page.replay_headline(log, program, shown)
    tables, notes = [page.refusals_table(reports)], [page.frames_left_out(log)]
    write_html(path, title, printed, figure=figure, headline=headline, tables=tables, notes=notes)


def _find_capacities(
    log: AllocationLog,
    program: ReplayProgram,
    specs: list[ResourceSpec],
    options: ReplayOptions,
    confirm_runs: int,
    json_out: bool,
    virtual: list[ResourceSpec],
) -> bool:
    """Search each resource; print the table (or JSON). True when every search found a size."""
    found_virtual = virtual_capacity_output.search(log, program, virtual, options, confirm_runs)
    specs = [s for s in specs if s not in virtual]
    if not specs:
        if json_out:
            output.print_json(
                {"skipped_rows": skipped_rows_json(log),
                 "virtual_gpu": [entry.as_dict() for entry in found_virtual]}
            )  # fmt: skip
        else:
            virtual_capacity_output.render(found_virtual, options, program)
        return all(entry.found for entry in found_virtual)
    results: list[CapacityResult | NoCapacityFound] = []
    with output.progress("finding capacity") as bar:
        for spec in specs:
            try:
                found = find_capacity(
                    log, spec, options, program=program, confirm_runs=confirm_runs, progress=bar
                )
            except NoCapacityFound as err:  # said in the table; the other resources go on
                results.append(err)
                continue
            results.append(found)
    on_virtual = [s for s in specs if resolve_backend(options.backend, s, options.device).name
                  == "virtual"]  # fmt: skip
    rmm_fits: dict[str, list[Fit]] = {}
    with output.progress("fits on every virtual GPU") as bar:
        for done, spec in enumerate(on_virtual):  # RMM's resources on each preset
            bar(done, len(on_virtual), spec.label)
            rmm_fits[spec.label] = fits(log, spec, options, program=program)
    if json_out:
        output.print_json(
            {
                "skipped_rows": skipped_rows_json(log),
                "capacities": [
                    {
                        **_capacity_json(s, r),
                        **(
                            {"fits": [f.as_dict() for f in rmm_fits[s.label]]}
                            if s.label in rmm_fits
                            else {}
                        ),
                    }
                    for s, r in zip(specs, results, strict=True)
                ],
                **({"virtual_gpu": [e.as_dict() for e in found_virtual]} if found_virtual else {}),
            }
        )
    else:
        _print_capacities(program, specs, results, options, confirm_runs)
        if rmm_fits:
            virtual_capacity_output.render_fits(list(rmm_fits.items()))
            rmm = rmm_fetch.locate(options.rmm_version)
            output.line(f"{', '.join(rmm_fits)}: {device_text(rmm, options.virtual_device())}.")
        if found_virtual:
            virtual_capacity_output.render(found_virtual, options, program)
    every = all(isinstance(r, CapacityResult) for r in results)
    return every and all(entry.found for entry in found_virtual)


def _capacity_json(
    spec: ResourceSpec, result: CapacityResult | NoCapacityFound
) -> dict[str, object]:
    if isinstance(result, CapacityResult):
        return dict(result.as_dict())
    return {"resource": spec.label, "capacity_bytes": None, "error": str(result)}


def _print_capacities(
    program: ReplayProgram,
    specs: list[ResourceSpec],
    results: list[CapacityResult | NoCapacityFound],
    options: ReplayOptions,
    confirm_runs: int,
) -> None:
    peak = program.peak_requested_bytes
    # The exact size is in the spec to use (whole IEC units) and in --json.
    table = output.Table(
        "Smallest size that replays the log with no failure",
        ["resource", "capacity", "cap/peak", "probes", "use"],
        right=("capacity", "cap/peak", "probes"),
    )
    for spec, r in zip(specs, results, strict=True):
        if isinstance(r, CapacityResult):
            table.add_row(
                r.resource,
                output.human_bytes(r.capacity_bytes),
                f"{r.capacity_bytes / max(peak, 1):.3f}",
                f"{len(r.probes):,}",
                r.sized_spec,
            )
        else:
            table.add_row(spec.label, output.Styled("none found", "red"), "", "", "-")
    output.print_table(table)
    output.line(
        f"peak requested by the log: {output.human_bytes(peak)} ({peak:,} bytes); each size "
        f"passed {1 + confirm_runs} replays in a row (--confirm-runs {confirm_runs} more)."
    )
    for r in results:
        if isinstance(r, NoCapacityFound):
            output.error(str(r))
    several = len(program.streams) > 1 or (options.threads == "logged" and len(program.threads) > 1)
    # (the virtual GPU replays on one thread in the log's order: the same every time)
    on_gpu = [s for s in specs if resolve_backend(options.backend, s, options.device).name
              != "virtual"]  # fmt: skip
    if several and any(spec.kind in STREAM_ORDERED_KINDS for spec in on_gpu):
        output.line(
            "This log has several streams or threads: stream-ordered pools (RMM's pools, "
            "async) pick free blocks across streams in an order that can change from run to "
            "run, so a size near the edge can pass and later fail. Add headroom, or raise "
            "--confirm-runs."
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
    f = report.failures[0]
    size, live = output.human_bytes(f.size_bytes), output.human_bytes(f.live_bytes)
    recorded = " (recorded-failed: refused when recorded too)" if f.recorded_failed else ""
    return f"{f.where}: {size} with {live} live{recorded}"


def _print_table(reports: list[ReplayReport], recorded: RecordedFigures | None = None) -> None:
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


def _print_virtual_devices(reports: list[ReplayReport]) -> None:
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


def _print_notes(program: ReplayProgram, reports: list[ReplayReport]) -> None:
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
