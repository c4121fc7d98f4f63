"""Where the calls to size come from: the command line, call logs and workload files.

`hipmem size`, `hipmem recommend` and `hipmem check` share this (through sizing/request.py),
so they accept the same sources with the same options (`CallSources` is filled from options
in hipmem_cli/options.py). What is read is said through `Say` (sizing/say.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hipmem._core.skipped_input import (
    SHOWN_PLACES,
    NothingToAnswer,
    SkippedInput,
    SkippedPlace,
    refuse_skipped,
)

from ..errors import CallLogError, SizingUsageError
from ..rocm.catalog import Catalog, load_catalog
from ..say import Say
from ..sweeps.plan import SweptCall, plan_sweep
from ..sweeps.range import DEFAULT_MAX_POINTS, BadSweep, parse_sweep
from .spec import Call, parse_call

if TYPE_CHECKING:
    from .logs import CallLog

_PROBLEMS_SHOWN = 5  # per log file; the rest are counted


@dataclass
class CallSources:
    call_texts: list[str] = field(default_factory=list)
    from_logs: list[Path] = field(default_factory=list)
    workloads: list[Path] = field(default_factory=list)
    strict: bool = False
    # False for a gate (`check`, `recommend`): a line that is not a call could change its
    # answer, so it is an error unless --accept-skipped (`size` shows what it sized).
    accept_skipped: bool = True
    # Filled by gather_calls: what each call log held (for reports and --json).
    logs: list[CallLog] = field(default_factory=list)
    # `--sweep ARG=RANGE`: every CALL argument is sized at every point (sizing/sweeps/).
    sweeps: list[str] = field(default_factory=list)
    max_points: int = DEFAULT_MAX_POINTS


def gather_calls(
    sources: CallSources, catalog: Catalog | None = None, say: Say | None = None
) -> list[tuple[Call, int] | SweptCall]:
    """Every call the user named with how often, parsed and checked before any worker starts.

    Counts stay integers (a log may say a call ran 10**12 times); identical calls are sized
    once and their counts added. Swept calls (`--sweep`, or `sweep:` in a workload) come as
    SweptCall, with at most `max_points` points in all.
    """
    catalog = catalog or load_catalog()
    say = say or Say()
    calls: list[tuple[Call, int] | SweptCall] = []
    calls.extend(_command_line_calls(sources, catalog))
    if sources.workloads:
        # Imported here: its schema and YAML readers (jsonschema, PyYAML) take about 60 ms to
        # import, which a command line of calls alone should not pay.
        from .workload_file import read_workload_entries

        for path in sources.workloads:
            calls.extend(read_workload_entries(path, catalog, max_points=sources.max_points))
    if sources.from_logs:
        # Imported here, as the workload reader above: the log formats read YAML (PyYAML, about
        # 13 ms to import).
        from .logs import read_call_log
    for path in sources.from_logs:
        with say.transfer(f"reading {path.name}") as report:
            log = read_call_log(path, catalog, progress=report)
        sources.logs.append(log)
        _report(log, sources.strict, say)
        _refuse_skipped_lines(log, sources.accept_skipped)
        calls.extend(log.calls)
    if not calls:
        raise SizingUsageError(
            "no calls to size: give CALL arguments, e.g. rocsolver_dgetrf:m=1024,n=1024"
            + (", or a log with calls in it" if sources.from_logs else "")
        )
    _check_total_points(calls, sources.max_points)
    return calls


def _command_line_calls(
    sources: CallSources, catalog: Catalog
) -> list[tuple[Call, int] | SweptCall]:
    if not sources.sweeps:
        return [(parse_call(text, catalog), 1) for text in sources.call_texts]
    if not sources.call_texts:
        raise SizingUsageError(
            "--sweep sweeps the CALL arguments, and none was given (a workload file gives "
            "each call its own `sweep:`)"
        )
    sweeps = [parse_sweep(text) for text in sources.sweeps]
    return [
        plan_sweep(text, sweeps, catalog, max_points=sources.max_points)
        for text in sources.call_texts
    ]


def _check_total_points(calls: list[tuple[Call, int] | SweptCall], max_points: int) -> None:
    swept = [item for item in calls if isinstance(item, SweptCall)]
    total = sum(item.point_count for item in swept)
    if total > max_points:
        raise BadSweep(
            f"{total:,} points in {len(swept)} sweeps, more than the limit of {max_points:,}: "
            "raise the limit to size them all, or sweep with a step",
            parameter="max_points",
        )


def skipped_lines(log: CallLog) -> SkippedInput:
    """The lines of a call log that were not calls, as every command names skipped input."""
    return SkippedInput(log.skipped_line_count, tuple(
        SkippedPlace(f"{log.path}:{p.line_number}", f"{p.kind}: {p.message}"
                     + (f" (and {p.count - 1:,} identical lines)" if p.count > 1 else ""))
        for p in log.problems[:SHOWN_PLACES]))  # fmt: skip


def _refuse_skipped_lines(log: CallLog, accept: bool) -> None:
    """No line of the log could be read: nothing to answer (every command); some could not:
    a gate's answer could change with them (exit 1 unless accepted)."""
    skipped = skipped_lines(log)
    if skipped.count and not log.calls and not log.no_workspace:
        raise NothingToAnswer(skipped.count, skipped.first)
    refuse_skipped(skipped.count, skipped.first, accept=accept)


def accepted_skipped_lines(sources: CallSources) -> SkippedInput:
    """What the gate's answer did without (--accept-skipped), over every call log read."""
    total = SkippedInput()
    for log in sources.logs:
        total += skipped_lines(log)
    return total


def _report(log: CallLog, strict: bool, say: Say) -> None:
    """One line on stderr for the file, and one per kind of line that was not a call."""
    if strict and log.problems:
        raise CallLogError(log.problems[0].where(log.path) + " (--strict)")
    skipped = log.skipped_line_count
    no_workspace = sum(log.no_workspace.values())
    summary = (
        f"{log.path}: {log.format}, {log.line_count:,} lines, {log.call_count:,} calls "
        f"({len(log.calls):,} distinct)"
    )
    if no_workspace:
        summary += f", {no_workspace:,} calls of routines that need no workspace"
    if skipped:
        summary += f", {skipped:,} lines skipped"
    say.info(summary)
    for problem in log.problems[:_PROBLEMS_SHOWN]:
        say.warning(problem.where(log.path))
    if len(log.problems) > _PROBLEMS_SHOWN:
        rest = log.problems[_PROBLEMS_SHOWN:]
        lines = sum(problem.count for problem in rest)
        distinct = "" if lines == len(rest) else f" ({len(rest):,} distinct)"
        say.warning(
            f"{log.path}: {lines:,} more skipped line{'s' if lines > 1 else ''}{distinct}, "
            f"the first at line {rest[0].line_number} (--json lists them all)"
        )
    if not log.calls:
        say.warning(f"{log.path}: no calls found")
