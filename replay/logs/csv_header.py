"""An RMM log's header: which era wrote the file (a Thread column or not, the time format)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from hipmem._core.close_names import closest

from ..errors import LogFormatError

HEADER_WITH_THREAD = "Thread,Time,Action,Pointer,Size,Stream"
HEADER_WITHOUT_THREAD = "Time,Action,Pointer,Size,Stream"
KNOWN_HEADERS = (HEADER_WITH_THREAD, HEADER_WITHOUT_THREAD)


class LogHeaderError(LogFormatError):
    """The first line is not an RMM/hipMM log header: the file given is not a log, an input
    file hipmem cannot use (usage, as for a workload or snapshot that is not one)."""

    exit_code = 2


@dataclass(frozen=True)
class CsvLayout:
    """What the header and first row say about a file's era."""

    has_thread: bool
    colon_times: bool  # HH:MM:SS:ffffff, written before RMM 21.06

    @property
    def names(self) -> list[str]:
        return (HEADER_WITH_THREAD if self.has_thread else HEADER_WITHOUT_THREAD).split(",")


def read_layout(source: str, stream: BinaryIO) -> CsvLayout:
    """The layout of a file, from its header and first row; not a log: `LogHeaderError`."""
    head = stream.read(64 * 1024)
    if not head:
        raise LogHeaderError(f"{source}:1: empty file; expected the header '{HEADER_WITH_THREAD}'")
    lines = head.splitlines()
    header = lines[0].decode("utf-8", "replace").strip().lstrip("\ufeff")
    if header not in KNOWN_HEADERS:
        raise LogHeaderError(f"{source}:1: {_header_complaint(header)}")
    has_thread = header == HEADER_WITH_THREAD
    colon_times = False
    if len(lines) > 1:
        fields = lines[1].split(b",")
        time_field = fields[1 if has_thread else 0] if len(fields) > 1 else b""
        colon_times = time_field.count(b":") == 3
    return CsvLayout(has_thread=has_thread, colon_times=colon_times)


def _header_complaint(header: str) -> str:
    shown = header if len(header) <= 60 else header[:57] + "..."
    close = closest(header, KNOWN_HEADERS, n=1, cutoff=0.6)
    if close:
        return f"header '{shown}' is misspelt; expected '{close[0]}'"
    return (
        f"no RMM log header (found '{shown}'); expected '{HEADER_WITH_THREAD}' "
        f"(or '{HEADER_WITHOUT_THREAD}' for logs before mid-2020)"
    )
