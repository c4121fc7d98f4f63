"""`hipmem fleet LOGS_OR_DIRS... -r SPEC...`: replay a fleet's logs on Dask, one task a pair."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hipmem._core.plot_files import check_plot_path
from hipmem._core.skipped_input import SHOWN_PLACES, skipped_json

from ..replay.capacity.confirmation import CONFIRM_RUNS
from ..replay.engine.backends import is_host_spec
from ..replay.engine.options import ReplayOptions
from ..replay.engine.resources import parse_spec
from ..replay.fleet.cluster import (
    check_scheduler_address,
    fleet_client,
    plan_local_cluster,
    require_dask,
)
from ..replay.fleet.records import STATUS_OK
from ..replay.fleet.results import ResultsFile
from ..replay.fleet.run import (
    DEFAULT_RETRIES,
    FleetRequest,
    FleetRun,
    check_fleet_paths,
    find_fleet_logs,
    run_fleet,
)
from ..replay.fleet.summary import ResourceSummary, Spread, summarize_fleet
from . import output
from .options import (
    DeviceMemoryOption,
    JsonOption,
    TorchVersionOption,
    VirtualDeviceOption,
    memory_bytes,
    said_limits,
)

_NAMES_SHOWN = 5  # logs named per line below the table; --json names all
_PIPED_EVERY_S = 5.0  # piped: a progress line at most this often (and one per stage)


# The exit codes after the arguments and options, as in every command's help.
EPILOG = """Exit codes: 0 every pair replayed with no refused allocation (with --find-capacity: a
capacity was found for every pair); 1 a resource refused an allocation the log did not record
as failed, or a pair failed (damaged log, worker died past --retries, no capacity); 2 usage.

Docs: hipmem docs fleet
"""


def register(app: typer.Typer) -> None:
    app.command("fleet", epilog=EPILOG)(fleet_command)


def fleet_command(
    logs: Annotated[
        list[Path],
        typer.Argument(help="Allocation logs (RMM CSVs, PyTorch snapshots) or folders of them."),
    ],
    resource: Annotated[
        list[str],
        typer.Option(
            "--resource",
            "-r",
            help="Resource to replay through (as `hipmem replay`).",
            metavar="SPEC",
        ),
    ],
    capacity: Annotated[
        bool,
        typer.Option("--find-capacity", help="Also bisect each log's smallest pool/limit."),
    ] = False,
    confirm_runs: Annotated[
        int, typer.Option("--confirm-runs", help="With --find-capacity: replays to confirm.", min=0)
    ] = CONFIRM_RUNS,
    scheduler: Annotated[
        Optional[str],  # noqa: UP045 - typer reads the annotation at runtime on Python 3.10
        typer.Option(help="Dask scheduler address (tcp://host:8786); default: a local cluster."),
    ] = None,
    workers: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(help="Local cluster: workers (default: one per GPU, or per CPU core).", min=1),
    ] = None,
    results: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(help="JSON-lines file: each pair appended as it ends; a re-run resumes."),
    ] = None,
    retries: Annotated[
        int, typer.Option(help="Tries again for a pair whose worker died.", min=0)
    ] = DEFAULT_RETRIES,
    send_logs: Annotated[
        bool,
        typer.Option("--send-logs", help="Send each log's bytes to its worker (no shared disk)."),
    ] = False,
    backend: Annotated[
        str,
        typer.Option(help="hip, cuda, host, virtual (torch and RMM resources, no GPU) or auto."),
    ] = "auto",
    device: VirtualDeviceOption = None,
    device_memory: DeviceMemoryOption = None,
    torch: TorchVersionOption = None,
    rmm: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--rmm",
            metavar="VERSION",
            help="RMM release whose resources run on the virtual GPU (25.4, 24.12; "
            "`hipmem rmm fetch` gets it). Default: 25.4.0.",
            show_default=False,
        ),
    ] = None,
    threads: Annotated[
        str, typer.Option(help="logged: one replay thread per logged thread; single: one.")
    ] = "logged",
    streams: Annotated[
        str,
        typer.Option(help="logged: each logged stream on its own stream; default: all on one."),
    ] = "logged",
    plot: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(help="Write the capacity distribution per resource to this image."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Replay every log through every resource on a Dask cluster; summarize the fleet."""
    require_dask()
    specs = [parse_spec(text) for text in resource]
    said_limits(resource)
    options = ReplayOptions(
        backend=backend,
        threads=threads,
        streams=streams,
        device_name=device,
        device_memory_bytes=memory_bytes(device_memory, "--device-memory"),
        torch_version=torch,
        rmm_version=rmm,
    )
    options.check()
    if plot is not None:
        check_plot_path(plot)
    results_file = ResultsFile(results) if results is not None else None
    if results_file is not None:
        results_file.check_writable()
    check_fleet_paths(logs)
    if scheduler is not None:
        check_scheduler_address(scheduler)
    _say("finding logs ...")
    request = FleetRequest(
        logs=find_fleet_logs(logs),
        specs=specs,
        options=options,
        find_capacity=capacity,
        confirm_runs=confirm_runs,
        retries=retries,
        send_logs=send_logs,
    )
    request.check()
    found, pairs = len(request.logs), len(request.logs) * len(specs)
    _say(f"{found:,} logs x {len(specs):,} resource(s): {pairs:,} pairs")
    plan = None
    if scheduler is None:
        # A missing GPU or library is said before any worker starts; the virtual GPU and
        # host memory need no GPU, so their workers are one per CPU core.
        from ..replay.engine.preflight import preflight  # the engine: after the first line

        targets = preflight(specs, options, rmm_releases=[rmm])
        on_virtual = [targets.on_virtual_gpu(s, options) for s in specs]
        gpus = backend != "host" and not all(
            is_host_spec(spec) or virtual for spec, virtual in zip(specs, on_virtual, strict=True)
        )
        plan = plan_local_cluster(gpus_needed=gpus, workers=workers)
    with output.progress("fleet", piped_every_s=_PIPED_EVERY_S) as bar:
        bar(0, None, f"starting {plan.describe()} ..." if plan else
            f"joining the cluster at {scheduler} ...")  # fmt: skip
        with fleet_client(scheduler, plan) as client:
            run = run_fleet(client, request, results_file, progress=bar)
    _say_unused(run)
    names = [spec.label for spec in specs]
    summaries = summarize_fleet(run.records, names)
    if plot is not None:
        from ..replay.fleet.plot import write_fleet_plot

        write_fleet_plot(plot, run.records, names)
    if json_out:
        output.print_json(_payload(run, summaries, scheduler, plan))
    else:
        where = plan.describe() if plan else f"the cluster at {scheduler} ({run.workers} workers)"
        _print_answer(run, summaries, capacity, where, plot, resumed=results is not None)
    raise typer.Exit(_exit_code(run, capacity))


def _say(text: str) -> None:
    """What the sweep is doing, on stderr, as it starts each step (on a terminal too)."""
    output.info(f"fleet: {text}")


def _say_unused(run: FleetRun) -> None:
    """The results file's lines that could not be used: the first few, each on its line, and
    how many more (--json lists the first 100)."""
    for place in run.unused_places[:SHOWN_PLACES]:
        output.warning(f"{place.where}: line not used: {place.reason}")
    more = run.unused_lines - min(len(run.unused_places), SHOWN_PLACES)
    if more > 0:
        lines = "line" if more == 1 else "lines"
        output.warning(f"and {more:,} more {lines} of the results file not used "
                       "(--json lists the first 100: results_lines_not_used)")  # fmt: skip


def _exit_code(run: FleetRun, capacity: bool) -> int:
    for record in run.records:
        if record["status"] != STATUS_OK:
            return 1
        if not capacity and record.get("failure_count"):
            return 1
    return 0


def _payload(
    run: FleetRun, summaries: list[ResourceSummary], scheduler: str | None, plan: Any
) -> dict[str, Any]:
    return {
        "cluster": scheduler or plan.kind,
        "workers": run.workers,
        "pairs": len(run.records),
        "pairs_resumed": run.skipped_pairs,
        "pairs_run": run.replayed_pairs,
        "results_lines_not_used": skipped_json(run.unused_lines, run.unused_places),
        "resources": [s.as_dict() for s in summaries],
        "records": run.records,
    }


def _size(spread: Spread | None, attribute: str) -> str:
    return "n/a" if spread is None else output.human_bytes(int(getattr(spread, attribute)))


def _ratio(spread: Spread | None) -> str:
    if spread is None:
        return "n/a"
    return f"{spread.p50:.3f} / {spread.p95:.3f} / {spread.max:.3f}"


def _table(summaries: list[ResourceSummary], capacity: bool) -> output.Table:
    columns = ["", *[s.resource for s in summaries]]
    table = output.Table(
        title="The fleet, per resource (peaks over the logs with no failure)",
        columns=columns,
        right=columns[1:],
        label_columns=1,
    )
    rows: list[tuple[str, list[str]]] = [
        ("logs", [f"{s.logs:,}" for s in summaries]),
        ("no failure", [f"{s.no_failure:,}" for s in summaries]),
        ("refused allocations", [f"{s.with_refusals:,}" for s in summaries]),
        ("pairs failed", [f"{s.failed:,}" for s in summaries]),
        ("events replayed", [f"{s.events:,}" for s in summaries]),
        ("peak reserved p50", [_size(s.peak_reserved, "p50") for s in summaries]),
        ("peak reserved p95", [_size(s.peak_reserved, "p95") for s in summaries]),
        ("peak reserved max", [_size(s.peak_reserved, "max") for s in summaries]),
        ("peak reserved total", [_size(s.peak_reserved, "total") for s in summaries]),
        ("fragmentation p50/p95/max", [_ratio(s.fragmentation) for s in summaries]),
    ]
    if capacity:
        rows += [
            ("capacity p50", [_size(s.capacity, "p50") for s in summaries]),
            ("covers p95 of logs", [_size(s.capacity, "p95") for s in summaries]),
            ("covers all logs", [_size(s.capacity, "max") for s in summaries]),
        ]
    for label, cells in rows:
        table.add_row(output.whole(label), *map(output.whole, cells))
    return table


def _print_answer(
    run: FleetRun,
    summaries: list[ResourceSummary],
    capacity: bool,
    where: str,
    plot: Path | None,
    *,
    resumed: bool,
) -> None:
    say = output.line
    # Pairs found done are said only where a results file was given: none, nothing to resume.
    done_before = f", {run.skipped_pairs:,} already in the results file" if resumed else ""
    say(f"{len(run.records):,} pairs on {where}: {run.replayed_pairs:,} run now{done_before}.")
    output.print_table(_table(summaries, capacity))
    for s in summaries:
        if capacity and s.capacity is not None:
            covers_p95, covers_all = int(s.capacity.p95), int(s.capacity.max)
            say(
                f"{s.resource}: {covers_p95:,} bytes cover 95% of the logs, {covers_all:,} "
                f"cover all; the largest is needed by {_names(s.capacity_drivers)}"
            )
        elif s.peak_reserved is not None:
            say(
                f"{s.resource}: largest peak reserved {int(s.peak_reserved.max):,} bytes, in "
                f"{_names(s.peak_reserved_drivers)}"
            )
        if s.refusing_logs and not capacity:
            say(f"{s.resource}: refused allocations in {_names(s.refusing_logs)}")
    for record in run.records:
        if record["status"] != STATUS_OK:
            say(
                f"failed: {record['log']} with {record['spec']} after {record.get('attempts', 1)}"
                f" attempt(s): {record.get('reason')}"
            )
    if plot is not None:
        output.written("plot", plot)


def _names(logs: list[str]) -> str:
    shown = ", ".join(logs[:_NAMES_SHOWN])
    more = len(logs) - _NAMES_SHOWN
    return shown + (f" and {more:,} more (--json lists them all)" if more > 0 else "")
