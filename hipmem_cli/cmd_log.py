"""`hipmem log inspect`: what an RMM/hipMM allocation log holds, with no GPU."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from ..replay.errors import ReplayUsageError
from ..replay.logs.analysis import LogSummary, analyze, live_trace
from ..replay.logs.events import AllocationLog
from ..replay.logs.loader import load_log
from . import output
from .html_output import captured, check_html_option, write_html
from .options import HtmlOption, JsonOption, PlotOption, check_plot_option
from .skipped_rows import warn_skipped_rows

log_app = typer.Typer(
    help="Read RMM/hipMM allocation logs (no GPU needed).",
    epilog="Docs: hipmem docs allocation-logs",
    no_args_is_help=True,
    rich_markup_mode=None,
)

EPILOG = """\b
Examples:
  hipmem log inspect samples/serve-first-2000.csv.gz
  hipmem log inspect samples/serve-first-2000.csv.gz --plot live.png \\
      --per-stream
  hipmem log inspect samples/serve-first-2000.csv.gz --html live.html
  hipmem log inspect samples/serve-first-2000.csv.gz --json --strict

Exit codes: 0 read; 1 a file cannot be read (or, with --strict, a row); 2 usage, or a
file that is not an allocation log; 130 interrupted.

Docs: hipmem docs allocation-logs
"""

NS_PER_S = 1_000_000_000
DAY_NS = 86_400 * NS_PER_S


def inspect(
    logs: Annotated[
        list[Path],
        typer.Argument(
            help="Log files (.csv or .csv.gz); several are read in order.", metavar="LOG"
        ),
    ],
    json: JsonOption = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Any row that cannot be read is an error (exit 1).")
    ] = False,
    plot: PlotOption = None,
    per_stream: Annotated[
        bool, typer.Option("--per-stream", help="In the plot, one line per stream as well.")
    ] = False,
    html: HtmlOption = None,
) -> None:
    """Counts, peak live bytes, leaks, per-thread and per-stream figures and anomalies of a log."""
    if per_stream and plot is None:
        raise ReplayUsageError("--per-stream adds lines to the plot: give --plot FILE too")
    check_plot_option(plot)  # before loading: a typo should not cost a long load
    check_html_option(html)
    with output.progress("loading", transfer=True) as progress:
        log = load_log(logs, strict=strict, progress=progress)
    with output.progress("analysing") as progress:
        progress(0, None)
        summary = analyze(log)
    if plot is not None:
        from ..replay.logs.plot import plot_timeline

        with output.progress("plotting") as progress:
            progress(0, None)
            plot_timeline(log, live_trace(log.events), summary, plot, per_stream=per_stream)
    warn_skipped_rows(log)
    kept = captured() if html else contextlib.nullcontext(output.Captured())
    with kept as printed:
        if json:
            output.print_json(summary.as_dict())
        else:
            _print_summary(summary)
    if plot is not None and not json:
        output.written("plot", plot)
    if html is not None:
        _write_page(html, log, summary, printed)


def _write_page(
    path: Path, log: AllocationLog, summary: LogSummary, printed: output.Captured
) -> None:
    from ..replay.pictures.html_timeline import bytes_text, frames_left_out, log_figure

    names = ", ".join(Path(s).name for s in log.sources[:3])
    names += " ..." if len(log.sources) > 3 else ""
    title = f"hipmem log inspect: {names} ({summary.events:,} events)"
    headline = []
    if summary.peak is not None:
        headline.append(
            f"peak live: {bytes_text(summary.peak.live_bytes)} at row "
            f"{summary.peak.event_index:,} ({summary.peak.source}:{summary.peak.line})"
        )
    with output.progress("writing the page") as progress:
        progress(0, None)
        figure = log_figure(log, live_trace(log.events), summary, "Live bytes")
    write_html(path, title, printed, figure=figure, headline=headline,
               notes=[frames_left_out(log)])  # fmt: skip


def _time_of_day(time_ns: int | None) -> str:
    if time_ns is None:
        return "-"
    days, rest = divmod(time_ns, DAY_NS)
    seconds, nanos = divmod(rest, NS_PER_S)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{nanos // 1000:06d}"
    return text + (f" (+{days} day{'s' if days > 1 else ''})" if days else "")


def _duration(span_ns: int) -> str:
    seconds = span_ns / NS_PER_S
    if seconds < 60:
        return f"{seconds:.3f} s"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}h {minutes:02d}m {secs:04.1f}s" if hours else f"{minutes}m {secs:04.1f}s"


def _bytes(n_bytes: int) -> str:
    return f"{output.human_bytes(n_bytes)} ({n_bytes:,} B)"


def _where(s: LogSummary, source: str, line: int) -> str:
    """`1234` for a single log, `name.csv:1234` when several were read (line numbers are
    never written with separators: they are looked up, not read as amounts)."""
    return str(line) if len(s.sources) == 1 else f"{Path(source).name}:{line}"


def _print_summary(s: LogSummary) -> None:
    out = output.line
    output.heading(", ".join(s.sources))
    if s.skipped_count:
        out(f"  {s.skipped_count:,} row(s) skipped as unreadable", style="yellow")
    out(
        f"  {s.events:,} events: {s.allocate_rows:,} allocate, {s.free_rows:,} free, "
        f"{s.failure_rows:,} allocate failure; {s.threads:,} thread(s), {s.streams:,} stream(s)"
    )
    out(
        f"  time: {_time_of_day(s.first_time_ns)} to {_time_of_day(s.last_time_ns)} "
        f"({_duration(s.span_ns)})"
    )
    if s.peak:
        out(
            f"  peak live: {_bytes(s.peak.live_bytes)} at {s.peak.source}:{s.peak.line} "
            f"({_time_of_day(s.peak.time_ns)}, event {s.peak.event_index:,})"
        )
    else:
        out("  peak live: 0 B (nothing allocated)")
    out(
        f"  live at end (never freed): {s.live_at_end_count:,} allocation(s), "
        f"{_bytes(s.live_at_end_bytes)}"
    )
    out(
        f"  zero-byte allocations: {s.zero_byte_allocations:,} "
        f"({s.zero_byte_live_at_end:,} never freed; not counted above)"
    )
    _print_recordings(s)
    _print_groups(s)
    _print_sizes(s)
    _print_anomalies(s)


def _print_recordings(s: LogSummary) -> None:
    """What a PyTorch snapshot adds: its allocator's reserved memory, settings, partial trace."""
    out = output.line
    for r in s.recordings:
        out(f"  recorded by PyTorch ({r.source}):")
        out(
            f"    reserved by its allocator: peak {_bytes(r.peak_reserved_bytes)}, "
            f"{_bytes(r.start_reserved_bytes)} when recording began"
        )
        conf = r.alloc_conf or "(not set: default settings)"
        out(f"    PYTORCH_CUDA_ALLOC_CONF={conf}")
        if r.pre_recording_allocations:
            out(
                f"    {r.pre_recording_allocations:,} allocation(s) made before recording "
                "began (line 0): the trace is partial (recording started late, or "
                "max_entries was reached)"
            )
        for oom in r.ooms:
            free = "unknown" if oom.device_free_bytes is None else _bytes(oom.device_free_bytes)
            out(
                f"    out of memory at {oom.where}: {_bytes(oom.size_bytes)} asked, "
                f"device free {free}"
            )


def _print_groups(s: LogSummary) -> None:
    for title, groups, hex_keys in (
        ("thread", s.per_thread, False),
        ("stream", s.per_stream, True),
    ):
        table = output.Table(
            f"Per {title} (live bytes counted on the allocating {title})",
            [title, "events", "allocate", "free", "failure", "peak live"],
            right=("events", "allocate", "free", "failure", "peak live"),
        )
        for g in groups:
            key = (f"{g.key:#x}" if g.key else "0 (default)") if hex_keys else str(g.key)
            table.add_row(
                key, f"{g.events:,}", f"{g.allocate_rows:,}", f"{g.free_rows:,}",
                f"{g.failure_rows:,}", output.human_bytes(g.peak_live_bytes),
            )  # fmt: skip
        output.print_table(table)


def _print_sizes(s: LogSummary) -> None:
    table = output.Table(
        "Allocation sizes (powers of two, zero-byte excluded)",
        ["size", "count", "total", ""],
        right=("count", "total"),
    )
    most = max((b.count for b in s.size_histogram), default=1)
    for b in s.size_histogram:
        bar = "█" * max(1, round(30 * b.count / most))
        label = f"{output.human_bytes(b.low_bytes)} – <{output.human_bytes(b.high_bytes)}"
        table.add_row(label, f"{b.count:,}", output.human_bytes(b.total_bytes), bar)
    output.print_table(table)
    if s.largest:
        large = output.Table(
            "Largest allocations",
            ["size", "bytes", "line", "thread", "stream", "freed"],
            right=("size", "bytes"),
        )
        for a in s.largest:
            large.add_row(
                output.human_bytes(a.size_bytes), f"{a.size_bytes:,}",
                _where(s, a.source, a.line), str(a.thread),
                f"{a.stream:#x}" if a.stream else "0", "yes" if a.freed else "no",
            )  # fmt: skip
        output.print_table(large)


def _print_anomalies(s: LogSummary) -> None:
    table = output.Table(
        "Anomalies (the rules: hipmem docs allocation-logs)",
        ["anomaly", "count", "first lines"],
        right=("count",),
    )
    for a in s.anomalies:
        lines = ", ".join(str(ref.line) for ref in a.first) + (
            " ..." if a.count > len(a.first) else ""
        )
        table.add_row(output.Styled(a.name, "yellow" if a.count else "dim"), f"{a.count:,}", lines)
    output.print_table(table)
    if s.failures:
        failures = output.Table(
            "Allocate failures (live bytes just before)",
            ["where", "requested", "live"],
            right=("requested", "live"),
        )
        for f in s.failures:
            failures.add_row(
                _where(s, f.source, f.line), _bytes(f.size_bytes), _bytes(f.live_bytes)
            )
        output.print_table(failures)


def convert(
    log_path: Annotated[
        Path,
        typer.Argument(
            help="A PyTorch memory snapshot (.pickle, .pkl, .gz) or RMM log.", metavar="LOG"
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--output", "-o", help="The RMM CSV to write (.csv or .csv.gz).", metavar="FILE"
        ),
    ],
) -> None:
    """Write a log (a PyTorch snapshot, say) as RMM's CSV, so RMM's own tools read it.

    A snapshot of several devices gives one file per device, named as rmm names them
    (`OUT.dev<N>.csv`).
    """
    from ..replay.logs.writer import check_output, output_paths, write_rmm_csv

    check_output(out)  # before loading: a path that cannot be written costs nothing
    with output.progress("loading", transfer=True) as progress:
        log = load_log([log_path], progress=progress)
    output_paths(log, out)  # the name is checked before anything is written
    for path in write_rmm_csv(log, out):
        output.written("log", path)


CONVERT_EPILOG = """\b
Examples:
  hipmem log convert tests/data/snapshots/oom.pickle.gz -o oom.csv.gz
  hipmem log convert tests/data/snapshots/train-default.pickle.gz -o train.csv

Exit codes: 0 written; 1 the log cannot be read or the file written; 2 usage, or a
file that is not an allocation log; 130 interrupted.

Docs: hipmem docs snapshots
"""


def register(app: typer.Typer) -> None:
    log_app.command("convert", epilog=CONVERT_EPILOG)(convert)
    log_app.command("inspect", epilog=EPILOG)(inspect)
    app.add_typer(log_app, name="log")
