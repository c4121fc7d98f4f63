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
names the file and line. It is untrusted input: at most `MAX_WORKLOAD_BYTES`, UTF-8, YAML
without aliases or repeated keys (`sizing/calls/strict_yaml.py`), counts up to 2**63 - 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..errors import SizingError, WorkloadError
from ..rocm.catalog import Catalog, load_catalog
from ..sweeps.plan import SweptCall, plan_sweep
from ..sweeps.range import DEFAULT_MAX_POINTS, parse_sweep
from .input_files import UnreadableInput, read_capped
from .spec import Call, make_call, parse_call
from .strict_yaml import StrictYamlError, compose_strict, load_strict

MAX_WORKLOAD_BYTES = 16 << 20  # written by hand: far more than any real one
MAX_COUNT = 2**63 - 1
_MESSAGE_CHARS = 300

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["version", "calls"],
    "additionalProperties": False,
    "properties": {
        "version": {"const": 1},
        "description": {"type": "string"},
        "calls": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "oneOf": [{"required": ["call"]}, {"required": ["routine"]}],
                "properties": {
                    "call": {"type": "string", "minLength": 1},
                    "routine": {"type": "string", "minLength": 1},
                    "args": {
                        "type": "object",
                        "additionalProperties": {"type": ["integer", "number", "string"]},
                    },
                    "count": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                    "note": {"type": "string"},
                    # ARG: RANGE (`1..64`, `1..4096:64`, `1..65536*2`, `1,8,20,64`) or a list
                    "sweep": {
                        "type": "object",
                        "minProperties": 1,
                        "additionalProperties": {
                            "oneOf": [
                                {"type": "string", "minLength": 1, "maxLength": 1000},
                                {
                                    "type": "array",
                                    "minItems": 1,
                                    "maxItems": 100_000,
                                    "items": {"type": "integer"},
                                },
                            ]
                        },
                    },
                },
                "dependentSchemas": {"call": {"not": {"required": ["args"]}}},
            },
        },
    },
}


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
    `sweep` (of at most `max_points` points). Raises WorkloadError (file:line)."""
    catalog = catalog or load_catalog()
    root, data = _load_yaml(path)
    _check_argument_names(path, root, data)
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(SCHEMA).iter_errors(data)
    )
    if error is not None:
        where = _line_of(root, list(error.absolute_path))
        field = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        message = error.message
        if len(message) > _MESSAGE_CHARS:  # the message quotes the value: say the rule instead
            message = f"fails the schema's {error.validator!r} rule ({error.validator_value!r})"
        raise WorkloadError(f"{path}:{where}: {field}: {message}")
    calls: list[tuple[Call, int] | SweptCall] = []
    for index, entry in enumerate(data["calls"]):
        if is_matmul_entry(entry):
            continue  # hipBLASLt: read by read_workload_matmuls
        if "sweep" in entry:
            calls.append(_swept(path, root, index, entry, catalog, max_points))
            continue
        try:
            if "call" in entry:
                call = parse_call(entry["call"], catalog)
            else:
                call = make_call(entry["routine"], entry.get("args", {}), catalog)
        except SizingError as err:
            raise WorkloadError(f"{path}:{_line_of(root, ['calls', index])}: {err}") from None
        calls.append((call, int(entry.get("count", 1))))
    return calls


def _swept(
    path: Path,
    root: yaml.Node | None,
    index: int,
    entry: dict[str, Any],
    catalog: Catalog,
    max_points: int,
) -> SweptCall:
    """A call with `sweep: {ARG: RANGE or [values]}`: the same rules as `--sweep ARG=RANGE`.
    A bad range names the line of its sweep; a bad call, the line of its entry."""
    sweeps = []
    for arg, spec in entry["sweep"].items():
        text = ",".join(map(str, spec)) if isinstance(spec, list) else spec
        try:
            sweeps.append(parse_sweep(f"{arg}={text}"))
        except SizingError as err:
            where = _line_of(root, ["calls", index, "sweep", arg])
            raise WorkloadError(f"{path}:{where}: {err}") from None
    count = int(entry.get("count", 1))
    try:
        if "call" in entry:
            return plan_sweep(entry["call"], sweeps, catalog, count=count, max_points=max_points)
        given = entry.get("args", {})
        routine = catalog.lookup(entry["routine"])
        return plan_sweep(routine, sweeps, catalog, given=given, count=count, max_points=max_points)
    except SizingError as err:
        raise WorkloadError(f"{path}:{_line_of(root, ['calls', index])}: {err}") from None


def _load_yaml(path: Path) -> tuple[Any, Any]:
    """The file's YAML node tree (for line numbers) and data, read by the strict rules."""
    text = _read_text(path)
    try:
        return compose_strict(text), load_strict(text)
    except StrictYamlError as err:
        raise WorkloadError(f"{path}:{err.line}: {err}") from None
    except RecursionError:
        raise WorkloadError(f"{path}: nested too deeply to be a workload") from None


def _read_text(path: Path) -> str:
    try:
        raw = read_capped(path, MAX_WORKLOAD_BYTES)
    except UnreadableInput as err:
        raise WorkloadError(str(err)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise WorkloadError(
            f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})"
        ) from None


def _check_argument_names(path: Path, root: yaml.Node | None, data: Any) -> None:
    """`args: {5: 3}`: YAML allows any key, an argument name is text."""
    calls = data.get("calls") if isinstance(data, dict) else None
    for index, entry in enumerate(calls if isinstance(calls, list) else []):
        args = entry.get("args") if isinstance(entry, dict) else None
        for key in args if isinstance(args, dict) else ():
            if not isinstance(key, str):
                where = _line_of(root, ["calls", index, "args"])
                raise WorkloadError(
                    f"{path}:{where}: calls/{index}/args: {key!r} is not an argument name"
                )


def _line_of(node: yaml.Node | None, path: list[Any]) -> int:
    """The 1-based line of the YAML node at a JSON-Schema error path (the nearest one found)."""
    line = node.start_mark.line + 1 if node is not None else 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


def is_matmul_entry(entry: dict[str, Any]) -> bool:
    """A hipBLASLt call (`hipblaslt_matmul:...`), sized apart from the rocBLAS/rocSOLVER ones."""
    name = entry.get("routine") or str(entry.get("call", "")).split(":", 1)[0]
    return str(name).strip() == "hipblaslt_matmul"


def read_workload_matmuls(path: Path) -> tuple[dict[Any, int], int]:
    """The hipBLASLt calls of a workload with their counts, and how many other calls it has.
    The file is checked exactly as `read_workload` checks it (schema, aliases, lines)."""
    from ..hipblaslt.matmul import parse_matmul

    root, data = _load_yaml(path)
    found: dict[Any, int] = {}
    others = 0
    entries = data.get("calls") if isinstance(data, dict) else None
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict) or not is_matmul_entry(entry):
            others += 1
            continue
        spec = entry.get("call") or "hipblaslt_matmul:" + ",".join(
            f"{k}={v}" for k, v in (entry.get("args") or {}).items()
        )
        try:
            call = parse_matmul(str(spec))
        except SizingError as err:
            raise WorkloadError(f"{path}:{_line_of(root, ['calls', index])}: {err}") from None
        found[call] = found.get(call, 0) + int(entry.get("count", 1))
    return found, others
