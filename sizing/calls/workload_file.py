"""hipmem's own workload file: calls written by hand (e.g. kept in a repository for a CI step).

    # workload.yaml
    version: 1
    calls:
      - call: rocsolver_dgetrf:m=1024,n=1024     # the command line's ROUTINE:ARG=VALUE form
        count: 10                                # optional, default 1
      - routine: rocblas_gemm_ex                 # or a routine and its arguments as a mapping
        args: {m: 4096, n: 4096, k: 4096, a_type: f16_r}
      - call: rocblas_dtrsm_batched:m=512,n=512  # sized at every point of a sweep (a grid
        sweep: {batch_count: 1..64}              # when several); a range or a list [1, 8]

The file is checked against `SCHEMA` (JSON Schema) before any call is built; every error
names the file and line. It is untrusted input: at most `MAX_WORKLOAD_BYTES`, 100,000
entries and 500,000 YAML values, UTF-8, YAML without aliases or repeated keys
(`sizing/calls/strict_yaml.py`), counts up to 2**63 - 1; identical entries are one call,
their counts added (`sizing/calls/workload_reading.py` reads and checks it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import SizingError, WorkloadError
from ..rocm.catalog import Catalog, load_catalog
from ..sweeps.plan import SweptCall, plan_sweep
from ..sweeps.range import DEFAULT_MAX_POINTS, parse_sweep
from .spec import Call, make_call, parse_call
from .workload_reading import (
    MAX_COUNT,
    MAX_WORKLOAD_BYTES,
    MAX_WORKLOAD_ENTRIES,
    MAX_WORKLOAD_VALUES,
    SCHEMA,
    Entry,
    Workload,
    read_checked,
)

__all__ = [
    "MAX_COUNT",
    "MAX_WORKLOAD_BYTES",
    "MAX_WORKLOAD_ENTRIES",
    "MAX_WORKLOAD_VALUES",
    "SCHEMA",
    "is_matmul_entry",
    "read_workload",
    "read_workload_entries",
    "read_workload_matmuls",
]


def read_workload(path: Path, catalog: Catalog | None = None) -> list[tuple[Call, int]]:
    """The calls of a workload file with their counts. Raises WorkloadError (file:line); a
    call with a `sweep` is one too (`read_workload_entries` reads those)."""
    calls: list[tuple[Call, int]] = []
    for entry in read_workload_entries(path, catalog):
        if isinstance(entry, SweptCall):
            raise WorkloadError(
                f"{path}: {entry.label} is swept: read the file with read_workload_entries"
            )
        calls.append(entry)
    return calls


def read_workload_entries(
    path: Path, catalog: Catalog | None = None, *, max_points: int = DEFAULT_MAX_POINTS
) -> list[tuple[Call, int] | SweptCall]:
    """The calls of a workload file with their counts, and a SweptCall for each call with a
    `sweep` (of at most `max_points` points). Identical entries are one call, their counts
    added. Raises WorkloadError (file:line)."""
    catalog = catalog or load_catalog()
    workload = read_checked(path)
    calls: list[tuple[Call, int] | SweptCall] = []
    for entry in workload.entries:
        if is_matmul_entry(entry.fields):
            continue  # hipBLASLt: read by read_workload_matmuls
        if "sweep" in entry.fields:
            calls.append(_swept(workload, entry, catalog, max_points))
            continue
        try:
            if "call" in entry.fields:
                call = parse_call(entry.fields["call"], catalog)
            else:
                call = make_call(entry.fields["routine"], entry.fields.get("args", {}), catalog)
        except SizingError as err:
            raise WorkloadError(f"{path}:{workload.line_of(entry.first)}: {err}") from None
        calls.append((call, entry.count))
    return calls


def _swept(workload: Workload, entry: Entry, catalog: Catalog, max_points: int) -> SweptCall:
    """A call with `sweep: {ARG: RANGE or [values]}`: the same rules as `--sweep ARG=RANGE`.
    A bad range names the line of its sweep; a bad call, the line of its entry."""
    fields, path = entry.fields, workload.path
    sweeps = []
    for arg, spec in fields["sweep"].items():
        text = ",".join(map(str, spec)) if isinstance(spec, list) else spec
        try:
            sweeps.append(parse_sweep(f"{arg}={text}"))
        except SizingError as err:
            where = workload.line_of(entry.first, "sweep", arg)
            raise WorkloadError(f"{path}:{where}: {err}") from None
    count = entry.count
    try:
        if "call" in fields:
            return plan_sweep(fields["call"], sweeps, catalog, count=count, max_points=max_points)
        given = fields.get("args", {})
        routine = catalog.lookup(fields["routine"])
        return plan_sweep(routine, sweeps, catalog, given=given, count=count, max_points=max_points)
    except SizingError as err:
        raise WorkloadError(f"{path}:{workload.line_of(entry.first)}: {err}") from None


def is_matmul_entry(entry: dict[str, Any]) -> bool:
    """A hipBLASLt call (`hipblaslt_matmul:...`), sized apart from the rocBLAS/rocSOLVER ones."""
    name = entry.get("routine") or str(entry.get("call", "")).split(":", 1)[0]
    return str(name).strip() == "hipblaslt_matmul"


def read_workload_matmuls(path: Path) -> tuple[dict[Any, int], int]:
    """The hipBLASLt calls of a workload with their counts, and how many other calls it has.
    The file is checked exactly as `read_workload` checks it (schema, aliases, lines)."""
    from ..hipblaslt.matmul import parse_matmul

    workload = read_checked(path)
    found: dict[Any, int] = {}
    others = 0
    for entry in workload.entries:
        if not is_matmul_entry(entry.fields):
            others += entry.occurrences
            continue
        fields = entry.fields
        spec = fields.get("call") or "hipblaslt_matmul:" + ",".join(
            f"{k}={v}" for k, v in (fields.get("args") or {}).items()
        )
        try:
            call = parse_matmul(str(spec))
        except SizingError as err:
            raise WorkloadError(f"{path}:{workload.line_of(entry.first)}: {err}") from None
        found[call] = found.get(call, 0) + entry.count
    return found, others
