"""What a fleet record must hold to be summed: the one check of every record, whether it
was read back from a results file (input: anyone may have edited it) or returned by a worker.

A record is checked as a log row is: every field hipmem writes and nothing else, each of its
type (an integer is an int, never a bool, a float or a string of digits) and in its range.
Byte figures are whole numbers below 2**62, the bound the loader holds every log to (its
allocations add up to less, so no peak, capacity or total of one log reaches it), and an
allocation's size is at most 1 PiB, as a log row's is; counts are below 2**62, durations below
2**63 ns. So no summary of checked records passes those bounds (a total across logs is an
exact integer). Strings are bounded too (a path at most PATH_MAX), so a record hipmem writes
is always under the results file's line limit (`results.MAX_LINE_BYTES`).

The key (the log's content hash, spec, task, settings) is checked here for its form: a SHA-256
in hex, a spec that parses and is written as hipmem writes it; whether it matches a log of this
sweep, as that log is now, is the sweep's business (`run.py`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from ..engine.resources import parse_spec
from ..errors import ReplayError
from ..logs.bounds import MAX_PLAUSIBLE_BYTES, MAX_TOTAL_BYTES
from ..snapshots.pickle_machine import excerpt

RESULTS_VERSION = 1
TASK_REPLAY = "replay"
TASK_CAPACITY = "replay+capacity"
STATUS_OK = "ok"
STATUS_FAILED = "failed"

MAX_COUNT = 1 << 62  # events, failures, attempts, probes: what int64 counts with room
MAX_NS = 1 << 63  # a duration in ns that fits int64 (292 years)
PATH_CHARS = 4096  # PATH_MAX: no longer path can be opened
TEXT_CHARS = 4096  # a reason (run_pair keeps 2,000 characters), a spec, the settings
NAME_CHARS = 256  # a host, a worker's address, an outcome, a device list
FRAGMENTATION_ROUNDING = 1e-4  # written rounded to 4 places
REASON_CHARS = 160  # of a spec's own error, in the reason a line is not used

_SHA256 = re.compile(r"[0-9a-f]{64}")


class BadRecord(ReplayError):
    """A record that cannot be summed: the reason, naming the field."""


def _integer(low: int, high: int, what: str) -> Callable[[object], str | None]:
    """A whole number (an int: never a bool, a float or a string of digits), low <= n < high."""

    def check(value: object) -> str | None:
        return None if type(value) is int and low <= value < high else f"is not {what}"

    return check


def _number(value: object) -> str | None:
    """A ratio or a rate: a finite number, 0 or more (ints too: JSON writes 1.0 as 1.0, but
    an edited file may say 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "is not a number from 0 to below 2**62"
    return None if 0 <= value < MAX_COUNT else "is not a number from 0 to below 2**62"  # NaN too


def _text(limit: int) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if type(value) is not str:
            return "is not a string"
        if len(value) > limit:
            return f"is longer than {limit:,} characters"
        return None

    return check


def _or_none(check: Callable[[object], str | None]) -> Callable[[object], str | None]:
    return lambda value: None if value is None else check(value)


def _one_of(*allowed: str) -> Callable[[object], str | None]:
    return lambda value: None if value in allowed and type(value) is str else (
        f"is not one of {', '.join(allowed)}")  # fmt: skip


def _sha256(value: object) -> str | None:
    return None if type(value) is str and _SHA256.fullmatch(value) else (
        "is not a SHA-256 in lowercase hex")  # fmt: skip


def _version(value: object) -> str | None:
    if type(value) is not int or value != RESULTS_VERSION:
        return f"is not {RESULTS_VERSION} (the results format this hipmem writes)"
    return None


_bytes = _integer(0, MAX_TOTAL_BYTES, "a byte count from 0 to below 2**62")
_count = _integer(0, MAX_COUNT, "a count from 0 to below 2**62")
_ns = _integer(0, MAX_NS, "a duration in ns from 0 to below 2**63")

_WHERE: dict[str, Callable[[object], str | None]] = {
    "host": _or_none(_text(NAME_CHARS)),
    "pid": _or_none(_integer(0, 1 << 31, "a process id")),
    "worker": _or_none(_text(NAME_CHARS)),
    "backend": _or_none(_text(NAME_CHARS)),
    "visible_devices": _or_none(_text(NAME_CHARS)),
    "gpu": _or_none(_text(NAME_CHARS)),
}
_FIRST_FAILURE: dict[str, Callable[[object], str | None]] = {
    "source": _text(PATH_CHARS),
    "line": _count,
    "size_bytes": _integer(0, MAX_PLAUSIBLE_BYTES + 1, "an allocation size from 0 to 1 PiB"),
}


def _fields(checks: dict[str, Callable[[object], str | None]]) -> Callable[[object], str | None]:
    """A dict holding exactly these fields, each passing its check."""

    def check(value: object) -> str | None:
        if type(value) is not dict:
            return "is not an object"
        for name in value:
            if name not in checks:
                return f"has a field {excerpt(name)} hipmem never writes"
        for name, field_check in checks.items():
            if name not in value:
                return f"has no '{name}'"
            why = field_check(value[name])
            if why is not None:
                return f"'{name}' {excerpt(value[name])} {why}"
        return None

    return check


# Every record: its key, status and how many attempts it took. `where` and `task_wall_ns`
# come with a record a worker made; a pair the client gave up on has neither.
_KEY: dict[str, Callable[[object], str | None]] = {
    "version": _version,
    "log": _text(PATH_CHARS),
    "log_sha256": _sha256,
    "spec": _text(TEXT_CHARS),
    "task": _one_of(TASK_REPLAY, TASK_CAPACITY),
    "settings": _text(TEXT_CHARS),
    "status": _one_of(STATUS_OK, STATUS_FAILED),
    "attempts": _integer(1, MAX_COUNT, "a count from 1 to below 2**62"),
}
_OPTIONAL: dict[str, Callable[[object], str | None]] = {
    "where": _or_none(_fields(_WHERE)),
    "task_wall_ns": _ns,
}
_FAILED: dict[str, Callable[[object], str | None]] = {"reason": _text(TEXT_CHARS)}
_OK: dict[str, Callable[[object], str | None]] = {
    "events": _count,
    "wall_ns": _ns,
    "events_per_s": _number,
    "outcome": _text(NAME_CHARS),
    "failure_count": _count,
    "logged_failure_count": _count,
    "first_failure": _or_none(_fields(_FIRST_FAILURE)),
    "peak_requested_bytes": _bytes,
    "peak_reserved_bytes": _or_none(_bytes),
    "fragmentation": _or_none(_number),
    "unreturned_bytes": _bytes,
}
_CAPACITY: dict[str, Callable[[object], str | None]] = {
    "capacity_bytes": _bytes,
    "sized_option": _one_of("limit", "maximum"),
    "sized_spec": _text(TEXT_CHARS),
    "probes": _count,
}


def check_record(record: object) -> dict[str, Any]:
    """`record` if it may be summed, else BadRecord naming the first field that is wrong."""
    if type(record) is not dict:
        raise BadRecord(f"{excerpt(record)} is not a JSON object")
    wanted = _wanted_fields(record)
    for name in record:
        if name not in wanted and name not in _OPTIONAL:
            raise BadRecord(f"a field {excerpt(name)} hipmem never writes")
    for name, check in wanted.items():
        if name not in record:
            raise BadRecord(f"no '{name}'")
        _check_field(name, record[name], check)
    for name, check in _OPTIONAL.items():
        if name in record:
            _check_field(name, record[name], check)
    _check_spec(record["spec"])
    if record["status"] == STATUS_OK:
        _check_together(record)
    return record


def _wanted_fields(record: dict[str, Any]) -> dict[str, Callable[[object], str | None]]:
    """The fields this record must hold, by its status and task (those two checked first)."""
    for name in ("status", "task"):
        if name in record:
            _check_field(name, record[name], _KEY[name])
    if record.get("status") == STATUS_FAILED:
        # A log no worker could read has no hash: its pair failed before one was known.
        return {**_KEY, "log_sha256": _or_none_empty(_sha256), **_FAILED}
    figures = {**_KEY, **_OK}
    return {**figures, **_CAPACITY} if record.get("task") == TASK_CAPACITY else figures


def _or_none_empty(check: Callable[[object], str | None]) -> Callable[[object], str | None]:
    return lambda value: None if value == "" else check(value)


def _check_field(name: str, value: object, check: Callable[[object], str | None]) -> None:
    why = check(value)
    if why is not None:
        raise BadRecord(f"'{name}' {excerpt(value)} {why}")


def _check_spec(text: str) -> None:
    why = _spec_problem(text)
    if why is not None:
        raise BadRecord(f"'spec' {excerpt(text)} {why}")


@functools.lru_cache(maxsize=256)  # a results file holds a few specs, on many lines
def _spec_problem(text: str) -> str | None:
    try:
        label = parse_spec(text).label
    except ReplayError as err:
        why = str(err)  # names the spec again: kept short, it is shown before
        cut = why[:REASON_CHARS] + ("..." if len(why) > REASON_CHARS else "")
        return f"is not a resource spec ({cut})"
    # hipmem writes the spec as the user typed it, less the spaces around it (its label).
    return None if label == text else f"is not spelled as hipmem writes it ({label!r})"


def _check_together(record: dict[str, Any]) -> None:
    """What one field says of another: no more refusals than events replayed, and the
    fragmentation the ratio of the two peaks (as the report rounds it)."""
    for name in ("failure_count", "logged_failure_count"):
        if record[name] > record["events"]:
            events = record["events"]
            raise BadRecord(f"'{name}' {record[name]:,} is more than its {events:,} events")
    requested, reserved = record["peak_requested_bytes"], record["peak_reserved_bytes"]
    ratio = None if reserved is None or requested <= 0 else reserved / requested
    shown = record["fragmentation"]
    if (ratio is None) != (shown is None) or (
        ratio is not None and abs(ratio - shown) > FRAGMENTATION_ROUNDING
    ):
        raise BadRecord(
            f"'fragmentation' {excerpt(shown)} is not peak reserved over peak requested "
            f"({reserved!r} / {requested!r})"
        )
