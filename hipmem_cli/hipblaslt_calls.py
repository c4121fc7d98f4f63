"""`hipblaslt_matmul:...` calls in `hipmem size`: sized apart from the rocBLAS/rocSOLVER calls
(another library, its own version), shown in their own table, `hipblaslt` in `--json`."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from hipmem_cli import output
from sizing.hipblaslt_matmul import (
    MatmulReport,
    MatmulResult,
    is_matmul_spec,
    parse_matmul,
    size_matmuls,
)
from sizing.library_locator import Libraries
from sizing.session import _choose_device


def split_specs(specs: list[str]) -> tuple[list[str], list[str]]:
    """(rocBLAS/rocSOLVER specs, hipBLASLt specs), each in the order given."""
    others = [spec for spec in specs if not is_matmul_spec(spec)]
    return others, [spec for spec in specs if is_matmul_spec(spec)]


def size_specs(
    specs: list[str], chosen: list[Libraries], device: str | None, cus: int | None
) -> list[MatmulReport]:
    calls = [parse_matmul(spec) for spec in specs]
    target = _choose_device(device, cus)
    reports = []
    for libraries in chosen:
        with output.progress(f"hipBLASLt heuristics with ROCm {libraries.rocm}"):
            reports.append(size_matmuls(calls, target, libraries))
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
    table = Table(title=title, title_justify="left")
    table.add_column("call", overflow="fold")
    for report in reports:
        table.add_column(f"hipBLASLt {report.hipblaslt_version}", justify="right")
    table.add_column("cap changed choice", justify="right")
    table.add_column("count", justify="right")
    by_call = [{r.call: r for r in report.results} for report in reports]
    shown = [result.call for result in _largest_first(reports[-1])][:top]
    for call in shown:
        cells = []
        changed = []
        for results in by_call:
            result = results[call]
            cells.append(
                f"{result.bytes:,}" if result.bytes is not None else f"[red]{result.status}[/red]"
            )
            flag = result.cap_changed_choice
            changed.append("" if flag is None else ("yes" if flag else "no"))
        table.add_row(call.label, *cells, " / ".join(changed), str(results[call].count))
    unbounded = output.stdout.options.update(max_width=1 << 16)
    from rich.measure import Measurement

    width = output.stdout.width
    output.stdout.width = max(Measurement.get(output.stdout, unbounded, table).maximum, width)
    try:
        output.stdout.print(table)
    finally:
        output.stdout.width = width
    output.stdout.print(
        "[dim]bytes: the workspace of the heuristic's first algorithm within max_workspace "
        "(what an application that takes the first choice uses)[/dim]"
    )


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


def recommend_line(
    specs: list[str], libraries: Libraries, device: str | None, cus: int | None
) -> str:
    """`export HIPBLASLT_WORKSPACE_SIZE=KiB`: the smallest cap keeping every first choice."""
    from sizing.hipblaslt_matmul import recommended_kib

    (report,) = size_specs(specs, [libraries], device, cus)
    if report_failures([report]):
        import typer

        raise typer.Exit(1)
    kib = recommended_kib(report)
    output.stderr.print(
        f"[dim]HIPBLASLT_WORKSPACE_SIZE (KiB): the largest workspace of an uncapped first "
        f"choice among {len(report.results)} hipBLASLt call(s), hipBLASLt "
        f"{report.hipblaslt_version}[/dim]",
        highlight=False,
    )
    return f"export HIPBLASLT_WORKSPACE_SIZE={kib}"


def read_kib(value: str | None) -> tuple[int | None, str]:
    """The cap PyTorch uses, in bytes, and where it came from: --hipblaslt-value, else
    CUBLASLT_WORKSPACE_SIZE, else HIPBLASLT_WORKSPACE_SIZE (KiB); None: PyTorch's default."""
    import os

    from sizing.call_spec import _DECIMAL
    from sizing.errors import BadArgument

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
    specs: list[str], value: str | None, libraries: Libraries, device: str | None, cus: int | None
) -> bool:
    """Re-ask each call's heuristic with the value as its cap; False (and one line per call)
    when a first choice changes."""
    from sizing.hipblaslt_matmul import (
        PYTORCH_DEFAULT_CAP_BYTES,
        changed_by_cap,
        size_matmuls,
        with_cap,
    )

    cap_bytes, source = read_kib(value)
    calls = with_cap([parse_matmul(s) for s in specs], cap_bytes or PYTORCH_DEFAULT_CAP_BYTES)
    report = size_matmuls(calls, _choose_device(device, cus), libraries)
    if report_failures([report]):
        return False
    changed = changed_by_cap(report)
    for result in changed:
        assert result.uncapped is not None
        got = f"{result.algorithms[0].workspace_bytes:,}" if result.algorithms else "no algorithm"
        output.error(
            f"HIPBLASLT_WORKSPACE_SIZE ({source}) changes the first choice of "
            f"{result.call.shape_label()}: it needs {result.uncapped.workspace_bytes:,} bytes "
            f"(gets {got} bytes' algorithm instead; hipBLASLt {report.hipblaslt_version})"
        )
    if not changed:
        output.stdout.print(
            f"ok HIPBLASLT_WORKSPACE_SIZE ({source}) keeps the first choice of all "
            f"{len(report.results)} hipBLASLt call(s) (hipBLASLt {report.hipblaslt_version})",
            highlight=False,
        )
    return not changed
