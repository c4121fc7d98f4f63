"""`hipmem replay LOG --resource SPEC ...`: replay a log through real memory resources."""

from __future__ import annotations

import contextlib
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..replay.capacity.capacities import find_capacities
from ..replay.capacity.confirmation import CONFIRM_RUNS
from ..replay.engine.options import ReplayOptions
from ..replay.engine.program import ReplayProgram
from ..replay.engine.report import ReplayReport
from ..replay.engine.resources import parse_spec
from ..replay.errors import ReplayUsageError
from ..replay.job import load_job, replay_job
from ..replay.logs.events import AllocationLog
from ..replay.pictures.plot import write_plot
from . import output
from .capacity_output import render_capacities
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
    memory_bytes,
    said_limits,
)
from .replay_output import print_notes, print_table, print_virtual_devices
from .skipped_rows import skipped_rows_json, warn_skipped_rows
from .torch_releases import split_releases

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
  torch[:limit=BYTES,settings=max_split_size_mb:64]

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

Docs: hipmem docs replay
"""


class BackendChoice(str, Enum):
    """`--backend`: where the resources replay (replay/engine/backends.py resolves it)."""

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
        BackendChoice,
        typer.Option(
            help="Where to allocate; auto: the GPU there is, or for torch resources with no "
            "GPU, the virtual GPU."
        ),
    ] = BackendChoice.auto,
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
            help="With --find-capacity: replays the size found must pass again. "
            f"[default: {CONFIRM_RUNS}]",
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
    said_limits(resource)
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
        device_memory_bytes=memory_bytes(device_memory, "--device-memory"),
        torch_version=releases[0],
        rmm_version=rmm_releases[0],
    )
    options.check()
    # Every resource's backend, allocator release and virtual GPU build, before the log.
    with output.progress("loading", transfer=True) as bar:
        job = load_job(logs, specs, options, torch_releases=releases, rmm_releases=rmm_releases,
                       strict=strict, progress=bar)  # fmt: skip
    log, program = job.log, job.program
    warn_skipped_rows(log)
    kept = captured() if html else contextlib.nullcontext(output.Captured())
    if capacity:
        with kept as printed:
            with output.progress("finding capacity") as bar:
                found = find_capacities(log, specs, options, program=program, targets=job.targets,
                                        confirm_runs=confirm_runs, progress=bar)  # fmt: skip
            render_capacities(found, log, program, options, job.targets, json_out)
        if html:  # the search replays many sizes: the page draws the log's requested bytes
            _write_page(html, log, program, [], {}, printed)
        if not found.found:
            raise typer.Exit(1)
        return
    with output.progress("replaying") as bar:
        replays = replay_job(job, progress=bar)
    for level, sentence in replays.notices:
        (output.warning if level == "warning" else output.info)(sentence)
    reports = replays.reports
    limits = {s.label: s.limit_bytes or s.option_bytes("maximum") for s in replays.specs}
    if plot:
        write_plot(plot, program, reports, log.sources, limits)
    with kept as printed:
        if json_out:
            payload: dict[str, object] = {"sources": log.sources}
            payload["skipped_rows"] = skipped_rows_json(log)
            if replays.recorded is not None:
                payload["recorded"] = replays.recorded.as_dict()
            payload["resources"] = [r.as_dict() for r in reports]
            output.print_json(payload)
        else:
            print_table(reports, replays.recorded)
            print_notes(program, reports)
            print_virtual_devices(reports)
            for note in job.release_notes():
                output.warning(note)
    if plot:
        output.written("plot", plot)
    if html:
        _write_page(html, log, program, reports, limits, printed)
    if any(r.failure_count for r in reports):
        raise typer.Exit(1)


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
