"""`hipblaslt_matmul:...` calls in `hipmem size`: sized apart from the rocBLAS/rocSOLVER calls
(another library, its own version), shown in their own table, `hipblaslt` in `--json`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sizing.hipblaslt.matmul import (
    MatmulCall,
    MatmulReport,
    MatmulResult,
    is_matmul_spec,
    parse_matmul,
    size_matmuls,
)
from ..sizing.rocm.locator import Libraries
from ..sizing.rocm.on_demand import OnDemand
from ..sizing.session import _choose_device
from . import output


def split_specs(specs: list[str]) -> tuple[list[str], list[str]]:
    """(rocBLAS/rocSOLVER specs, hipBLASLt specs), each in the order given."""
    others = [spec for spec in specs if not is_matmul_spec(spec)]
    return others, [spec for spec in specs if is_matmul_spec(spec)]


def split_logs(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """(rocBLAS/rocSOLVER logs, hipBLASLt bench logs)."""
    from ..sizing.hipblaslt.log import is_hipblaslt_log

    ours = [path for path in paths if is_hipblaslt_log(path)]
    return [path for path in paths if path not in ours], ours


def read_logs(
    paths: list[Path], strict: bool, accept_skipped: bool = True
) -> dict[MatmulCall, int]:
    """Every call of the hipBLASLt logs, as often as logged; skipped lines are warned about
    with their numbers (the first one is an error with --strict; any is one for a gate that
    does not accept them: `accept_skipped` False). No line readable: nothing to answer."""
    from hipmem._core.skipped_input import NothingToAnswer, SkippedPlace, refuse_skipped

    from ..sizing.errors import CallLogError
    from ..sizing.hipblaslt.log import read_hipblaslt_log

    counts: dict[MatmulCall, int] = {}
    for path in paths:
        log = read_hipblaslt_log(path)
        if strict and log.skipped:
            raise CallLogError(log.skipped[0].where(path) + " (--strict)")
        output.info(
            f"{path}: hipblaslt-bench log, {log.line_count} lines, "
            f"{output.count(log.call_count)} calls ({output.count(len(log.calls))} distinct), "
            f"{output.count(len(log.skipped))} lines skipped"
        )
        for skipped in log.skipped[:5]:
            output.warning(skipped.where(path))
        places = [SkippedPlace(f"{path}:{s.line_number}", s.reason) for s in log.skipped[:5]]
        if log.skipped and not log.calls:
            raise NothingToAnswer(len(log.skipped), places)
        refuse_skipped(len(log.skipped), places, accept=accept_skipped)
        for call, count in log.calls.items():
            counts[call] = counts.get(call, 0) + count
    return counts


def size_specs(
    specs: list[str],
    chosen: list[Libraries],
    device: str | None,
    cus: int | None,
    logged: dict[MatmulCall, int] | None = None,
    fetch: OnDemand | None = None,
) -> list[MatmulReport]:
    """Size the named calls and the logged ones (each counted as often as it was logged);
    `fetch`: how a hipBLASLt build the cache lacks is fetched."""
    logged = logged or {}
    calls = [parse_matmul(spec) for spec in specs] + list(logged)
    target = _choose_device(device, cus)
    reports = []
    for libraries in chosen:
        with output.progress(f"hipBLASLt heuristics with ROCm {libraries.rocm}"):
            report = size_matmuls(calls, target, libraries, on_demand=fetch)
        warn_notice(report)
        for result in report.results:  # a logged call counts as often as it was logged
            result.count += max(0, logged.get(result.call, 0) - 1)
        reports.append(report)
    return reports


def _largest_first(report: MatmulReport) -> list[MatmulResult]:
    return sorted(
        report.results, key=lambda r: (-(r.bytes if r.bytes is not None else -1), -r.count)
    )


def render(reports: list[MatmulReport], top: int | None) -> None:
    first = reports[0]
    device = first.device
    title = (
        f"hipBLASLt workspace (first algorithm under the cap) on "
        f"{'virtual ' if device.virtual else ''}{device.name} "
        f"({device.arch.arch_features}, {device.compute_units} CUs)"
    )
    names = [report.build.label for report in reports]
    # The call (a long spec) last: too wide, it gets a line of its own under its row.
    table = output.Table(
        title=title,
        columns=[*names, "cap changed choice", "count", "call"],
        right=[*names, "cap changed choice", "count"],
    )
    by_call = [{r.call: r for r in report.results} for report in reports]
    shown = [result.call for result in _largest_first(reports[-1])][:top]
    for call in shown:
        cells: list[output.Cell] = []
        changed = []
        for results in by_call:
            result = results[call]
            if result.bytes is not None:
                cells.append(output.count(result.bytes))
            else:
                cells.append(output.Styled(result.status, "red"))
            flag = result.cap_changed_choice
            changed.append("" if flag is None else ("yes" if flag else "no"))
        table.add_row(*cells, " / ".join(changed), output.count(results[call].count), call.label)
    output.print_table(table)
    output.note(
        "bytes: the workspace of the heuristic's first algorithm within max_workspace "
        "(what an application that takes the first choice uses)"
    )
    for report in reports:
        output.note(report.build.describe())


def warn_notice(report: MatmulReport) -> None:
    """The one line saying the install had no hipBLASLt and which build answered instead."""
    if report.build.notice:
        output.warning(report.build.notice)


def as_json(reports: list[MatmulReport]) -> Any:
    if len(reports) == 1:
        return reports[0].as_dict()
    return [report.as_dict() for report in reports]


def report_failures(reports: list[MatmulReport]) -> bool:
    failed = False
    for report in reports:
        for result in report.failed:
            output.error(str(result.error))
            failed = True
    return failed


# ---- recommend --pytorch / check: HIPBLASLT_WORKSPACE_SIZE ------------------------------


def warn_cuda_variables() -> None:
    """PyTorch on ROCm reads the CUDA-era names first: set, they silently win."""
    import os

    for name, wins_over in (
        ("CUBLAS_WORKSPACE_CONFIG", "HIPBLAS_WORKSPACE_CONFIG"),
        ("CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE"),
    ):
        if os.environ.get(name):
            output.warning(
                f"{name} is set: PyTorch reads it before {wins_over}, on ROCm too; unset it"
            )


def recommend_variable(
    found: Gathered,
    libraries: Libraries,
    device: str | None,
    cus: int | None,
    fetch: OnDemand | None = None,
) -> tuple[str, str]:
    """(HIPBLASLT_WORKSPACE_SIZE, KiB): the smallest cap keeping every first choice."""
    from ..sizing.hipblaslt.matmul import recommended_kib

    (report,) = size_specs(found.specs, [libraries], device, cus, found.logged, fetch)
    if report_failures([report]):
        import typer

        raise typer.Exit(1)
    kib = recommended_kib(report)
    output.note(
        f"HIPBLASLT_WORKSPACE_SIZE (KiB): the largest workspace of an uncapped first "
        f"choice among {len(report.results)} hipBLASLt call(s), {report.build.describe()}",
        err=True,
    )
    return ("HIPBLASLT_WORKSPACE_SIZE", str(kib))


def read_kib(value: str | None) -> tuple[int | None, str]:
    """The cap PyTorch uses, in bytes, and where it came from: --hipblaslt-value, else
    CUBLASLT_WORKSPACE_SIZE, else HIPBLASLT_WORKSPACE_SIZE (KiB); None: PyTorch's default."""
    import os

    from ..sizing.calls.spec import _DECIMAL
    from ..sizing.errors import BadArgument

    source = "--hipblaslt-value"
    if value is None:
        for name in ("CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE"):
            if os.environ.get(name):
                value, source = os.environ[name], f"${name}"
                break
    if value is None:
        return None, "PyTorch's default"
    text = value.strip()
    if not _DECIMAL.fullmatch(text) or len(text) > 15 or int(text) < 0:
        raise BadArgument(f"{source}={value[:40]!r}: expected a whole number of KiB")
    return int(text) * 1024, f"{source}={text}"


def check_specs(
    found: Gathered,
    value: str | None,
    libraries: Libraries,
    device: str | None,
    cus: int | None,
    fetch: OnDemand | None = None,
) -> bool:
    """Re-ask each call's heuristic with the value as its cap; False (and one line per call)
    when a first choice changes."""
    from ..sizing.hipblaslt.matmul import (
        PYTORCH_DEFAULT_CAP_BYTES,
        changed_by_cap,
        size_matmuls,
        with_cap,
    )

    cap_bytes, source = read_kib(value)
    named = [parse_matmul(s) for s in found.specs] + list(found.logged)
    calls = with_cap(named, cap_bytes or PYTORCH_DEFAULT_CAP_BYTES)
    report = size_matmuls(calls, _choose_device(device, cus), libraries, on_demand=fetch)
    warn_notice(report)
    if report_failures([report]):
        return False
    changed = changed_by_cap(report)
    for result in changed:
        assert result.uncapped is not None
        got = f"{result.algorithms[0].workspace_bytes:,}" if result.algorithms else "no algorithm"
        output.error(
            f"HIPBLASLT_WORKSPACE_SIZE ({source}) changes the first choice of "
            f"{result.call.shape_label()}: it needs {result.uncapped.workspace_bytes:,} bytes "
            f"(gets {got} bytes' algorithm instead; {report.build.label})"
        )
    if changed:
        output.note(report.build.describe(), err=True)
    else:
        output.ok(
            f"HIPBLASLT_WORKSPACE_SIZE ({source}) keeps the first choice of all "
            f"{len(report.results)} hipBLASLt call(s) ({report.build.describe()})"
        )
    return not changed


def read_workloads(paths: list[Path]) -> tuple[dict[MatmulCall, int], int]:
    """The hipBLASLt calls of workload files (with counts), and how many other calls they hold."""
    from ..sizing.calls.workload_file import read_workload_matmuls

    found: dict[MatmulCall, int] = {}
    others = 0
    for path in paths:
        calls, rest = read_workload_matmuls(path)
        others += rest
        for call, count in calls.items():
            found[call] = found.get(call, 0) + count
    return found, others


@dataclass
class Gathered:
    """The hipBLASLt calls of a request, and what is left for rocBLAS/rocSOLVER."""

    specs: list[str]  # hipblaslt_matmul specs from the command line
    logged: dict[MatmulCall, int]  # from hipBLASLt bench logs and workloads, with counts
    calls: list[str]  # the other command-line specs
    from_log: list[Path]  # the other logs
    workload: list[Path]  # workloads with other calls in them

    @property
    def any(self) -> bool:
        return bool(self.specs or self.logged)

    @property
    def only(self) -> bool:
        """Nothing for rocBLAS/rocSOLVER in the request."""
        return not (self.calls or self.from_log or self.workload)


def gather(
    calls: list[str] | None,
    from_log: list[Path] | None,
    workload: list[Path] | None,
    strict: bool,
    accept_skipped: bool = True,
) -> Gathered:
    others, specs = split_specs(calls or [])
    other_logs, matmul_logs = split_logs(from_log or [])
    logged, other_workload_calls = read_workloads(workload or [])
    for call, count in read_logs(matmul_logs, strict, accept_skipped).items():
        logged[call] = logged.get(call, 0) + count
    workloads = list(workload or []) if other_workload_calls else []
    return Gathered(specs, logged, others, other_logs, workloads)
