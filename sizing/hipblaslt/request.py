"""The hipBLASLt calls of a sizing request (`size`, `recommend --pytorch`, `check`): named on
the command line (`hipblaslt_matmul:...`), logged by hipblaslt-bench, or listed in a workload,
set apart from the rocBLAS/rocSOLVER calls of the same request; sized, or checked against
the cap PyTorch passes (HIPBLASLT_WORKSPACE_SIZE)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hipmem._core.skipped_input import NothingToAnswer, SkippedPlace, refuse_skipped

from ..calls.spec import DECIMAL
from ..errors import BadArgument, CallLogError
from ..rocm.locator import Libraries
from ..rocm.on_demand import OnDemand
from ..worker.virtual_device import Device
from .log import HipblasltLog, is_hipblaslt_log, read_hipblaslt_log
from .matmul import (
    HIPBLASLT_VARIABLES,
    PYTORCH_DEFAULT_CAP_BYTES,
    MatmulCall,
    MatmulReport,
    is_matmul_spec,
    parse_matmul,
    size_matmuls,
    with_cap,
)

SHOWN_SKIPPED = 5  # skipped lines of a log named, per log (the rest are counted)
_CAP_FLAG = "--hipblaslt-value"


@dataclass
class MatmulRequest:
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

    def matmuls(self) -> list[MatmulCall]:
        """The named calls, then the logged ones (each once)."""
        return [parse_matmul(spec) for spec in self.specs] + list(self.logged)


def gather(
    calls: list[str] | None,
    from_log: list[Path] | None,
    workload: list[Path] | None,
    strict: bool,
    accept_skipped: bool = True,
    on_log: Callable[[Path, HipblasltLog], None] | None = None,
) -> MatmulRequest:
    """Set the hipBLASLt calls of a request apart: specs by their routine, logs by their
    lines, workloads by their entries. `on_log` hears of each hipBLASLt log as it is read
    (before its skipped lines can fail the request)."""
    others = [spec for spec in calls or [] if not is_matmul_spec(spec)]
    specs = [spec for spec in calls or [] if is_matmul_spec(spec)]
    matmul_logs = [path for path in from_log or [] if is_hipblaslt_log(path)]
    other_logs = [path for path in from_log or [] if path not in matmul_logs]
    logged, other_workload_calls = read_workloads(workload or [])
    for call, count in read_logs(matmul_logs, strict, accept_skipped, on_log).items():
        logged[call] = logged.get(call, 0) + count
    workloads = list(workload or []) if other_workload_calls else []
    return MatmulRequest(specs, logged, others, other_logs, workloads)


def read_logs(
    paths: list[Path],
    strict: bool,
    accept_skipped: bool = True,
    on_log: Callable[[Path, HipblasltLog], None] | None = None,
) -> dict[MatmulCall, int]:
    """Every call of the hipBLASLt logs, as often as logged. A skipped line is an error with
    `strict` (the first one), or for a gate that does not accept them (`accept_skipped`
    False); a log with no readable line leaves nothing to answer."""
    counts: dict[MatmulCall, int] = {}
    for path in paths:
        log = read_hipblaslt_log(path)
        if strict and log.skipped:
            raise CallLogError(log.skipped[0].where(path) + " (--strict)")
        if on_log is not None:
            on_log(path, log)
        shown = log.skipped[:SHOWN_SKIPPED]
        places = [SkippedPlace(f"{path}:{s.line_number}", s.reason) for s in shown]
        if log.skipped and not log.calls:
            raise NothingToAnswer(len(log.skipped), places)
        refuse_skipped(len(log.skipped), places, accept=accept_skipped)
        for call, count in log.calls.items():
            counts[call] = counts.get(call, 0) + count
    return counts


def read_workloads(paths: list[Path]) -> tuple[dict[MatmulCall, int], int]:
    """The hipBLASLt calls of workload files (with counts), and how many other calls they hold."""
    found: dict[MatmulCall, int] = {}
    others = 0
    if not paths:
        return found, others
    # Imported here: jsonschema and PyYAML take about 60 ms to import, which every `size`,
    # `recommend` and `check` of calls alone would pay (they ask this about hipBLASLt calls).
    from ..calls.workload_file import read_workload_matmuls

    for path in paths:
        calls, rest = read_workload_matmuls(path)
        others += rest
        for call, count in calls.items():
            found[call] = found.get(call, 0) + count
    return found, others


def size_request(
    request: MatmulRequest, device: Device, libraries: Libraries, fetch: OnDemand | None = None
) -> MatmulReport:
    """Size the named calls and the logged ones, each logged call counted as often as it was
    logged, with the hipBLASLt of `libraries` (`fetch`: how a build the cache lacks is
    fetched)."""
    report = size_matmuls(request.matmuls(), device, libraries, on_demand=fetch)
    for result in report.results:
        result.count += max(0, request.logged.get(result.call, 0) - 1)
    return report


def workspace_cap(
    value: str | None, environ: Mapping[str, str] = os.environ
) -> tuple[int | None, str]:
    """The cap PyTorch uses, in bytes, and where it came from: `value` (--hipblaslt-value),
    else CUBLASLT_WORKSPACE_SIZE, else HIPBLASLT_WORKSPACE_SIZE (KiB); None: PyTorch's
    default."""
    source = _CAP_FLAG
    if value is None:
        for name in HIPBLASLT_VARIABLES:
            if environ.get(name):
                value, source = environ[name], f"${name}"
                break
    if value is None:
        return None, "PyTorch's default"
    text = value.strip()
    if not DECIMAL.fullmatch(text) or len(text) > 15 or int(text) < 0:
        raise BadArgument(f"{source}={value[:40]!r}: expected a whole number of KiB")
    return int(text) * 1024, f"{source}={text}"


def size_under_cap(
    request: MatmulRequest,
    cap_bytes: int | None,
    device: Device,
    libraries: Libraries,
    fetch: OnDemand | None = None,
) -> MatmulReport:
    """Each call's heuristic asked again with `cap_bytes` (None: PyTorch's default) as its
    cap; `matmul.changed_by_cap` then says whose first choice the cap changes."""
    calls = with_cap(request.matmuls(), cap_bytes or PYTORCH_DEFAULT_CAP_BYTES)
    return size_matmuls(calls, device, libraries, on_demand=fetch)
