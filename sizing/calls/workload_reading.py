"""A workload file read within its limits and checked, its identical entries made one.

A workload is untrusted input, and its cost is bounded by what it holds, not only by its
bytes: at most `MAX_WORKLOAD_BYTES`, `MAX_WORKLOAD_ENTRIES` entries in `calls` and
`MAX_WORKLOAD_VALUES` YAML values in all, each counted in one pass over the parser's events
before any data is built (sizing/calls/strict_yaml.py). Identical entries are then one entry,
their counts added, before anything that costs per entry: the schema is checked once per
distinct entry, each distinct call is parsed once. A workload that repeats one call 50,000
times costs what the YAML of 50,000 lines does (about a second), not 50,000 checks (44 s).

The file is read once per process: the calls and the hipBLASLt calls of one workload are read
from the same reading, so a workload given as a pipe (`--workload <(...)`) is read whole.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from ..errors import WorkloadError
from .input_files import UnreadableInput, read_capped
from .spec import DECIMAL
from .strict_yaml import StrictDocument, StrictYamlError, TooManyValues, read_strict

MAX_WORKLOAD_BYTES = 16 << 20  # written by hand: far more than any real one
# Hand-written workloads hold tens of calls; a call made many times is one entry with a count.
MAX_WORKLOAD_ENTRIES = 100_000
# Every scalar, list and mapping: a call is 3 to 15, and one sweep list may hold 100,000.
MAX_WORKLOAD_VALUES = 500_000
MAX_COUNT = 2**63 - 1
_LONGEST_INT_DIGITS = 40  # longer whole numbers stay text when read (strict_yaml.py)
_MESSAGE_CHARS = 300

_COUNT = {"type": "integer", "minimum": 1, "maximum": MAX_COUNT}
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
                    "count": _COUNT,
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


@dataclass
class Entry:
    """One distinct entry of `calls`: as written (without its count), where it first is,
    how many entries are written so, and their counts added."""

    fields: dict[str, Any]
    first: int
    occurrences: int
    count: int


@dataclass
class Workload:
    """A workload file, checked: its distinct entries in the order they first appear."""

    path: Path
    document: StrictDocument
    entries: list[Entry]

    def line_of(self, index: int, *inner: Any) -> int:
        """The line of entry `index` of `calls` (or of a value inside it)."""
        return self.document.line_of(["calls", index, *inner])


def read_checked(path: Path) -> Workload:
    """The workload at `path`, read within its limits and checked against `SCHEMA`, its
    identical entries made one. Raises WorkloadError naming the file and line."""
    return _checked_text(str(path), _read_text(path))


@lru_cache(maxsize=2)  # the same text of the same file is checked once (the calls, then the
def _checked_text(name: str, text: str) -> Workload:  # hipBLASLt calls of one command)
    path = Path(name)
    document = _read_document(path, text)
    try:
        return _checked(path, document)
    except RecursionError:
        raise WorkloadError(f"{path}: nested too deeply to be a workload") from None


# A pipe's text (its device and inode): read again, a pipe would be empty.
_PIPE_TEXTS: dict[tuple[int, int], str] = {}


def _read_text(path: Path) -> str:
    try:
        found = path.stat()
    except OSError:
        found = None  # read_capped says why, in the project's words
    pipe = (found.st_dev, found.st_ino) if found and stat.S_ISFIFO(found.st_mode) else None
    if pipe in _PIPE_TEXTS:
        return _PIPE_TEXTS[pipe]
    text = _decoded(path)
    if pipe is not None:
        _PIPE_TEXTS[pipe] = text
        while len(_PIPE_TEXTS) > 4:  # the oldest go: one command reads a pipe twice at most
            del _PIPE_TEXTS[next(iter(_PIPE_TEXTS))]
    return text


def _decoded(path: Path) -> str:
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


def _read_document(path: Path, text: str) -> StrictDocument:
    try:
        return read_strict(
            text, items_of="calls", max_items=MAX_WORKLOAD_ENTRIES, max_values=MAX_WORKLOAD_VALUES
        )
    except TooManyValues as err:
        if err.what == "values":
            why = f"more than {err.limit:,} YAML values, the most a workload may hold"
        else:
            why = (
                f"more than {err.limit:,} calls, the most a workload may hold: give a call "
                "made many times one entry with `count:`"
            )
        raise WorkloadError(f"{path}:{err.line}: {why}") from None
    except StrictYamlError as err:
        raise WorkloadError(f"{path}:{err.line}: {err}") from None
    except RecursionError:
        raise WorkloadError(f"{path}: nested too deeply to be a workload") from None


def _checked(path: Path, document: StrictDocument) -> Workload:
    data = document.data
    calls = data.get("calls") if isinstance(data, dict) else None
    if not isinstance(calls, list):  # nothing to group: the schema says what is wrong
        _check_schema(path, document, data, [])
        raise AssertionError("the schema refuses a workload without a list of calls")
    distinct, firsts, which = _group(calls)
    _check_argument_names(path, document, distinct, firsts)
    _check_schema(path, document, {**data, "calls": distinct}, firsts)
    counts = [0] * len(distinct)
    occurrences = [0] * len(distinct)
    for index, entry in enumerate(calls):
        number = which[index]
        occurrences[number] += 1
        counts[number] += _count(path, document, index, entry.get("count", 1))
        if counts[number] > MAX_COUNT:
            raise WorkloadError(
                f"{path}:{document.line_of(['calls', index])}: calls/{index}: this call is "
                f"counted more than {MAX_COUNT:,} times in all (2**63 - 1)"
            )
    entries = [Entry(*entry) for entry in zip(distinct, firsts, occurrences, counts, strict=True)]
    return Workload(path, document, entries)


def _group(calls: list[Any]) -> tuple[list[Any], list[int], list[int]]:
    """The distinct entries without their counts, the index where each first is, and for
    every entry the number of its distinct one. Entries are alike when written alike: the
    same fields in the same order with the same values (`repr` tells 1, 1.0, '1' and True
    apart)."""
    seen: dict[str, int] = {}
    distinct: list[Any] = []
    firsts: list[int] = []
    which: list[int] = []
    for index, entry in enumerate(calls):
        shape = entry
        if isinstance(entry, dict):
            shape = {key: value for key, value in entry.items() if key != "count"}
        number = seen.setdefault(repr(shape), len(distinct))
        if number == len(distinct):
            distinct.append(shape)
            firsts.append(index)
        which.append(number)
    return distinct, firsts, which


def _check_argument_names(
    path: Path, document: StrictDocument, distinct: list[Any], firsts: list[int]
) -> None:
    """`args: {5: 3}`: YAML allows any key, an argument name is text."""
    for entry, first in zip(distinct, firsts, strict=True):
        args = entry.get("args") if isinstance(entry, dict) else None
        for key in args if isinstance(args, dict) else ():
            if not isinstance(key, str):
                where = document.line_of(["calls", first, "args"])
                raise WorkloadError(
                    f"{path}:{where}: calls/{first}/args: {key!r} is not an argument name"
                )


def _check_schema(path: Path, document: StrictDocument, data: Any, firsts: list[int]) -> None:
    """The first schema error (best_match's), at the entry where it is first written."""
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(SCHEMA).iter_errors(data)
    )
    if error is None:
        return
    parts = list(error.absolute_path)
    if len(parts) >= 2 and parts[0] == "calls" and isinstance(parts[1], int) and firsts:
        parts[1] = firsts[parts[1]]
    raise WorkloadError(f"{path}:{document.line_of(parts)}: {_said(parts, error)}")


def _count(path: Path, document: StrictDocument, index: int, count: Any) -> int:
    """An entry's count, 1 to 2**63 - 1; else WorkloadError naming its line."""
    if type(count) is int and 1 <= count <= MAX_COUNT:
        return count
    parts = ["calls", index, "count"]
    where = f"{path}:{document.line_of(parts)}"
    if isinstance(count, str) and len(count) > _LONGEST_INT_DIGITS and DECIMAL.fullmatch(count):
        digits = len(count.lstrip("+-"))
        if count.startswith("-"):
            bound = "less than the minimum of 1"
        else:
            bound = f"greater than the maximum of {MAX_COUNT:,} (2**63 - 1)"
        raise WorkloadError(
            f"{where}: calls/{index}/count: a whole number of {digits:,} digits is {bound}"
        )
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(_COUNT).iter_errors(count)
    )
    if error is None:  # a whole float (3.0): JSON Schema's integer
        return int(count)
    raise WorkloadError(f"{where}: {_said(parts, error)}")


def _said(parts: list[Any], error: jsonschema.ValidationError) -> str:
    """`FIELD: MESSAGE`, the message a rule's name where it would quote a long value."""
    field = "/".join(str(part) for part in parts) or "(top level)"
    message = error.message
    if len(message) > _MESSAGE_CHARS:  # the message quotes the value: say the rule instead
        message = f"fails the schema's {error.validator!r} rule ({error.validator_value!r})"
    return f"{field}: {message}"
