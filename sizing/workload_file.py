"""hipmem's own workload file: calls written by hand (e.g. kept in a repository for a CI step).

    # workload.yaml
    version: 1
    calls:
      - call: rocsolver_dgetrf:m=1024,n=1024     # the command line's ROUTINE:ARG=VALUE form
        count: 10                                # optional, default 1
      - routine: rocblas_gemm_ex                 # or a routine and its arguments as a mapping
        args: {m: 4096, n: 4096, k: 4096, a_type: f16_r}

The file is checked against `SCHEMA` (JSON Schema) before any call is built; every error
names the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sizing.call_spec import Call, make_call, parse_call
from sizing.catalog import Catalog, load_catalog
from sizing.errors import SizingError, WorkloadError

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
                    "count": {"type": "integer", "minimum": 1},
                    "note": {"type": "string"},
                },
                "dependentSchemas": {"call": {"not": {"required": ["args"]}}},
            },
        },
    },
}


def read_workload(path: Path, catalog: Catalog | None = None) -> list[tuple[Call, int]]:
    """The calls of a workload file with their counts. Raises WorkloadError (file:line)."""
    catalog = catalog or load_catalog()
    try:
        text = path.read_text()
    except OSError as err:
        raise WorkloadError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or err
        raise WorkloadError(f"{path}{line}: not valid YAML: {problem}") from None
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(SCHEMA).iter_errors(data)
    )
    if error is not None:
        where = _line_of(root, list(error.absolute_path))
        field = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise WorkloadError(f"{path}:{where}: {field}: {error.message}")
    calls = []
    for index, entry in enumerate(data["calls"]):
        try:
            if "call" in entry:
                call = parse_call(entry["call"], catalog)
            else:
                call = make_call(entry["routine"], entry.get("args", {}), catalog)
        except SizingError as err:
            raise WorkloadError(f"{path}:{_line_of(root, ['calls', index])}: {err}") from None
        calls.append((call, int(entry.get("count", 1))))
    return calls


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
