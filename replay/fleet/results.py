"""A fleet sweep's results file: one JSON object per line, one line per finished pair.

Each finished (log, resource) pair is appended as it comes, in one `write()` of a whole line
on a file opened for appending, then flushed to disk. A crash (the client killed, the machine
down) can at worst leave the last line without its newline: reading ignores that fragment and
the next append first cuts it off, so the file always holds whole lines only.

A pair is keyed by the log's content hash (SHA-256 of the file's bytes, computed on the
workers), the resource spec as hipmem spells it, what was asked (`replay`, or
`replay+capacity` with `--find-capacity`) and the replay settings. A re-run with the same file
skips pairs whose latest line says `ok`; pairs recorded as `failed` are tried again, and the
latest line of a key is the one that counts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ReplayError, ReplayUsageError

RESULTS_VERSION = 1
TASK_REPLAY = "replay"
TASK_CAPACITY = "replay+capacity"
STATUS_OK = "ok"
STATUS_FAILED = "failed"
MAX_LINE_BYTES = 1 << 20  # a longer line is not one hipmem wrote


class ResultsFileError(ReplayError):
    """The results file holds a line that hipmem did not write."""


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


class ResultsFile:
    """Append finished pairs; read back the latest record of each key."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def check_writable(self) -> None:
        """Fail before any work when the file cannot be appended to."""
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

    def read(self) -> dict[PairKey, dict[str, Any]]:
        """The latest record of every key; a last line cut short by a crash is left out."""
        if not self.path.is_file():
            return {}
        latest: dict[PairKey, dict[str, Any]] = {}
        with self.path.open("rb") as stream:
            for number, line in enumerate(stream, start=1):
                if not line.endswith(b"\n"):
                    break  # the fragment a crash left: never a finished pair
                record = self._parse(line, number)
                latest[PairKey.of(record)] = record
        return latest

    def _parse(self, line: bytes, number: int) -> dict[str, Any]:
        where = f"{self.path}:{number}"
        if len(line) > MAX_LINE_BYTES:
            raise ResultsFileError(f"{where}: a line of {len(line):,} bytes is not a result")
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ResultsFileError(f"{where}: not a JSON line; is this a results file?") from None
        keys = ("version", "log_sha256", "spec", "task", "settings", "status")
        if not isinstance(record, dict) or any(key not in record for key in keys):
            raise ResultsFileError(f"{where}: not a hipmem fleet result (no {', '.join(keys)})")
        if record["version"] != RESULTS_VERSION:
            raise ResultsFileError(
                f"{where}: results version {record['version']!r}, this hipmem writes "
                f"{RESULTS_VERSION}; use another --results file"
            )
        return record

    def append(self, record: dict[str, Any]) -> None:
        """Append one record as one whole line, on disk before this returns."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            self._cut_fragment(fd)
            written = os.write(fd, line)
            if written != len(line):  # a full disk: take the partial line back out
                os.ftruncate(fd, os.fstat(fd).st_size - written)
                raise ResultsFileError(f"{self.path}: the disk is full; the sweep stops here")
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _cut_fragment(fd: int) -> None:
        """Drop a last line with no newline (left by a crash) so the next one starts clean."""
        size = os.fstat(fd).st_size
        if size == 0:
            return
        block = min(size, MAX_LINE_BYTES + 1)
        tail = os.pread(fd, block, size - block)
        if tail.endswith(b"\n"):
            return
        cut = tail.rfind(b"\n")
        os.ftruncate(fd, size - block + cut + 1 if cut >= 0 else 0)
