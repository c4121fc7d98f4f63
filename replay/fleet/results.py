"""A fleet sweep's results file: one JSON object per line, one line per finished pair.

Each finished (log, resource) pair is appended as it comes, in one `write()` of a whole line
on a file opened for appending, then flushed to disk. A crash (the client killed, the machine
down) can at worst leave the last line without its newline: reading ignores that fragment and
the next append first cuts it off, so the file always holds whole lines only. A write that
fails (a full disk) is taken back out and said naming the file.

A pair is keyed by the log's content hash (SHA-256 of the file's bytes, computed on the
workers), the resource spec as hipmem spells it, what was asked (`replay`, or
`replay+capacity` with `--find-capacity`) and the replay settings. A re-run with the same file
skips pairs whose latest line says `ok`; pairs recorded as `failed` are tried again, and the
latest line of a key is the one that counts.

The file is input like any other: anyone may have edited it. It is read in blocks, a line
longer than MAX_LINE_BYTES skipped unread; every line is checked as a record
(`records.check_record`: fields, types, ranges) and against its `digest`, the SHA-256 of the
rest of the line as hipmem wrote it (so a figure edited by hand, or damaged, is found even where
its new value is plausible). A line that is not a record hipmem wrote is named (`FILE:LINE:
why`) and never used: when it names a pair of this sweep, that pair runs again. Only the
records of the sweep's own pairs are kept, so memory is the sweep's, whatever the file holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hipmem._core.bounded_lines import BLOCK_BYTES, bounded_lines
from hipmem._core.skipped_input import SkippedPlace

from ..errors import ReplayError, ReplayUsageError
from .records import BadRecord, check_record

# A line hipmem writes is about 700 bytes; the longest the checks of records.py let through
# (every string at its bound, every character one JSON escapes as a surrogate pair, 12 bytes)
# is about 220 KB. 1 MiB, as an allocation log's line: over 4x that, 1,500x a real line.
MAX_LINE_BYTES = 1 << 20
PLACES_KEPT = 100  # skipped lines named in --json; the rest are counted
DIGEST = "digest"  # the field of a line that holds the SHA-256 of the rest of it
LINE_START = b'{"version":'  # how every line hipmem writes starts (its first field)


class ResultsFileError(ReplayError):
    """The results file cannot be written (a full disk, a vanished folder): named."""


class ForeignResultsFile(ReplayUsageError):
    """--results names a file that holds no line of hipmem's: never appended to."""


@dataclass(frozen=True)
class PairKey:
    """What makes two pairs the same work: the log's content, the spec, the task, settings."""

    log_sha256: str
    spec: str
    task: str
    settings: str

    def text(self) -> str:
        return f"{self.log_sha256}|{self.spec}|{self.task}|{self.settings}"

    @staticmethod
    def of(record: dict[str, Any]) -> PairKey:
        return PairKey(
            str(record["log_sha256"]),
            str(record["spec"]),
            str(record["task"]),
            str(record["settings"]),
        )


@dataclass
class ReadBack:
    """What a results file gave: the latest record of each key asked for, and the lines that
    could not be used (counted; the first PLACES_KEPT named)."""

    records: dict[PairKey, dict[str, Any]] = field(default_factory=dict)
    skipped: int = 0
    places: list[SkippedPlace] = field(default_factory=list)

    def skip(self, place: str, reason: str) -> None:
        self.skipped += 1
        if len(self.places) < PLACES_KEPT:
            self.places.append(SkippedPlace(place, reason))


class ResultsFile:
    """Append finished pairs; read back the latest record of each key."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def check_writable(self) -> None:
        """Fail before any work when the file cannot be appended to, or holds something
        else than results (never appended to: it is someone's file)."""
        if self.path.is_dir():
            raise ReplayUsageError("is a directory", parameter="results", value=str(self.path))
        if self.path.exists() and not self.path.is_file():
            raise ReplayUsageError(
                "is not a regular file", parameter="results", value=str(self.path)
            )
        if not self.path.parent.is_dir():
            raise ReplayUsageError(
                f"folder '{self.path.parent}' does not exist",
                parameter="results",
                value=str(self.path),
            )
        try:
            with self.path.open("ab"):
                pass
        except OSError as err:
            raise ReplayUsageError(
                f"cannot be written: {err.strerror or err}",
                parameter="results",
                value=str(self.path),
            ) from None
        self._check_ours()

    def _check_ours(self) -> None:
        """A file with lines, none of them a JSON object with a `version` (a log, notes, a CSV
        named by mistake): refused. One line of hipmem's is enough (the start of one, the
        fragment a crash left, too): damaged lines among results are named and skipped when
        read."""
        something = False  # a line that is not blank
        with self.path.open("rb") as stream:
            for raw in bounded_lines(stream, max_line_bytes=MAX_LINE_BYTES):
                if raw is not None and raw.startswith(LINE_START):
                    return
                parsed = None if raw is None else _json(raw)
                if isinstance(parsed, dict) and "version" in parsed:
                    return
                something = something or raw is None or bool(raw.strip())
        if something:
            raise ForeignResultsFile(
                "holds no line of a hipmem fleet results file; name another file",
                parameter="results",
                value=str(self.path),
            )

    def read(
        self,
        slot_of: Callable[[PairKey], PairKey | None] = lambda key: key,
        unused: Callable[[dict[str, Any], str], None] | None = None,
    ) -> ReadBack:
        """The latest usable record of every key kept (`slot_of` says where a key's lines are
        kept, None: not at all; the latest line of a slot counts), the checked lines not kept
        handed to `unused` with their place, and the lines that are not records hipmem wrote,
        named. A last line cut short by a crash is left out. Memory: a block, a line and the
        records kept."""
        found = ReadBack()
        if not self.path.is_file():
            return found
        with self.path.open("rb") as stream:
            lines = bounded_lines(stream, max_line_bytes=MAX_LINE_BYTES, unterminated_last=False)
            for number, raw in enumerate(lines, start=1):
                place = f"{self.path}:{number}"
                slot, record = self._take(raw, place, slot_of, found)
                if record is not None and slot is None and unused is not None:
                    unused(record, place)
        return found

    @staticmethod
    def _take(
        raw: bytes | None,
        place: str,
        slot_of: Callable[[PairKey], PairKey | None],
        found: ReadBack,
    ) -> tuple[PairKey | None, dict[str, Any] | None]:
        """One line: (its slot, its record when checked); kept in `found` or named there."""
        if raw is None:
            found.skip(place, f"longer than {MAX_LINE_BYTES:,} bytes, skipped unread")
            return None, None
        if not raw.strip():
            return None, None
        parsed = _json(raw)
        if parsed is None:
            found.skip(place, "not a JSON line")
            return None, None
        key = _key_of(parsed)
        slot = None if key is None else slot_of(key)
        try:
            record = _unsealed(parsed)
        except BadRecord as err:
            found.skip(place, str(err))
            if slot is not None:
                found.records.pop(slot, None)  # the latest line of its slot: none to use
            return slot, None
        if slot is not None:
            found.records[slot] = record
        return slot, record

    def append(self, *records: dict[str, Any]) -> None:
        """Append records as whole lines, in one write, on disk before this returns; a write
        that fails is taken back out, and said naming the file (ResultsFileError)."""
        line = "".join(_sealed(record) + "\n" for record in records).encode()
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as err:
            raise self._cannot_write(err) from None
        try:
            _cut_fragment(fd)
            start = os.fstat(fd).st_size
            try:
                _write_all(fd, line)
                os.fsync(fd)
            except OSError as err:
                _truncate_quietly(fd, start)  # never a partial line left behind
                raise self._cannot_write(err) from None
        finally:
            os.close(fd)

    def _cannot_write(self, err: OSError) -> ResultsFileError:
        return ResultsFileError(f"cannot write {self.path}: {err.strerror or err}")


def _json(raw: bytes) -> Any:
    """The line's JSON value, or None for a line that is not JSON (or nests too deep, or holds
    an integer of more digits than Python converts)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return None


def _canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _sealed(record: dict[str, Any]) -> str:
    """The record's line: its fields, then the digest of them (of their canonical form:
    what JSON reads back from the line gives the same digest)."""
    digest = hashlib.sha256(_canonical(record).encode()).hexdigest()
    return json.dumps({**record, DIGEST: digest}, separators=(",", ":"))


def _unsealed(parsed: Any) -> dict[str, Any]:
    """The record of a line, checked (BadRecord says why not): its fields first (the more
    telling reason), then that its digest is of them."""
    if not isinstance(parsed, dict):
        return check_record(parsed)  # (says what it is instead)
    fields = {name: value for name, value in parsed.items() if name != DIGEST}
    record = check_record(fields)
    digest = parsed.get(DIGEST)
    if digest != hashlib.sha256(_canonical(record).encode()).hexdigest():
        why = "has no digest" if digest is None else "does not match its digest"
        raise BadRecord(f"the line {why}: edited or damaged since hipmem wrote it")
    return record


def _key_of(parsed: Any) -> PairKey | None:
    """The key a line names, when its four key fields are strings (its other fields may still
    be wrong: then this key's latest line is unusable)."""
    if not isinstance(parsed, dict):
        return None
    fields = [parsed.get(name) for name in ("log_sha256", "spec", "task", "settings")]
    texts = [value for value in fields if type(value) is str]
    return PairKey(*texts) if len(texts) == len(fields) else None


def _write_all(fd: int, data: bytes) -> None:
    """os.write until all is written: a short write is followed by one that says why."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _truncate_quietly(fd: int, size: int) -> None:
    with contextlib.suppress(OSError):  # /dev/full and the like: nothing to take back
        os.ftruncate(fd, size)


def _cut_fragment(fd: int) -> None:
    """Drop a last line with no newline (left by a crash) so the next one starts clean:
    back to the last newline, looked for a block at a time from the end (a fragment of any
    length, never more than a block in memory, never a whole line before it)."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end = size
    while end > 0:
        start = max(0, end - BLOCK_BYTES)
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            return
        end = start
    os.ftruncate(fd, 0)  # a file of one fragment: nothing finished in it
