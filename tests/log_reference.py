"""An independent, plain-Python reading of RMM logs (csv module, dicts), used by the tests to
derive every expected figure without going through the loader or the analysis."""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

DATA_LOGS = Path(__file__).parent / "data" / "logs"
# The first 5,000 events of each real log of the shared folder (recorded under PyTorch on an
# H200), committed so the tests pass in a lone clone. The full logs reach tests only through
# the `shared_logs` fixture.
REAL_LOGS_DIR = Path(__file__).parent / "data" / "real"
REAL_LOG_NAMES = ("cnn.csv.gz", "gpt.csv.gz", "serve.csv.gz")
REAL_LOGS = [REAL_LOGS_DIR / name for name in REAL_LOG_NAMES]
DAY_NS = 86_400 * 10**9

HEX = re.compile(r"0[xX][0-9a-fA-F]{1,16}")
TIME = re.compile(r"(\d\d):(\d\d):(\d\d)[.:](\d{6})")


@dataclass
class Row:
    line: int
    thread: int
    time_ns: int
    action: str
    pointer: int
    size: int
    stream: int


def _address(text: str) -> int | None:
    if text in ("(nil)", "0"):
        return 0
    return int(text, 16) if HEX.fullmatch(text) else None


def read_rows(path: Path) -> tuple[list[Row], list[int]]:
    """Good rows (times unwrapped past midnight) and the line numbers of bad ones."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    lines = io.StringIO(raw.decode("utf-8", "surrogateescape"), newline="")
    reader = csv.reader(lines)
    header = next(reader)
    has_thread = header[0] == "Thread"
    rows: list[Row] = []
    bad: list[int] = []
    day, previous = 0, None
    for number, fields in enumerate(reader, start=2):
        if not has_thread:
            fields = ["0", *fields]
        if len(fields) != 6:
            bad.append(number)
            continue
        thread, time_text, action, pointer, size, stream = fields
        match = TIME.fullmatch(time_text)
        ptr, strm = _address(pointer), _address(stream)
        if (
            not thread.isdigit()
            or not size.isdigit()
            or match is None
            or ptr is None
            or strm is None
            or action not in ("allocate", "free", "allocate failure")
        ):
            bad.append(number)
            continue
        h, m, s, us = (int(g) for g in match.groups())
        of_day = ((h * 60 + m) * 60 + s) * 10**9 + us * 1000
        if previous is not None and of_day < previous - DAY_NS // 2:
            day += 1
        elif previous is not None and of_day > previous + DAY_NS // 2:
            day -= 1
        previous = of_day
        rows.append(Row(number, int(thread), of_day + day * DAY_NS, action, ptr, int(size), strm))
    return rows, bad


@dataclass
class Figures:
    """What the analysis should say, by the documented rules, one row at a time."""

    peak_bytes: int = 0
    peak_line: int | None = None
    live_end_count: int = 0
    live_end_bytes: int = 0
    zero_byte_allocations: int = 0
    zero_byte_live_end: int = 0
    anomalies: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    failures_live: list[tuple[int, int]] = field(default_factory=list)  # (line, live bytes)
    thread_peak: dict[int, int] = field(default_factory=dict)
    stream_peak: dict[int, int] = field(default_factory=dict)
    thread_events: dict[int, int] = field(default_factory=dict)
    stream_events: dict[int, int] = field(default_factory=dict)
    histogram: dict[int, int] = field(default_factory=dict)  # bucket low bytes -> count


def figures(rows: list[Row]) -> Figures:
    f = Figures()
    live: dict[int, tuple[int, int, int]] = {}  # pointer -> (size, thread, stream)
    total = 0
    by_thread: dict[int, int] = defaultdict(int)
    by_stream: dict[int, int] = defaultdict(int)
    previous_time = None
    for r in rows:
        f.thread_events[r.thread] = f.thread_events.get(r.thread, 0) + 1
        f.stream_events[r.stream] = f.stream_events.get(r.stream, 0) + 1
        if previous_time is not None and r.time_ns < previous_time:
            f.anomalies["out_of_time_order"].append(r.line)
        previous_time = r.time_ns
        if r.action == "allocate failure":
            f.anomalies["allocate_failure"].append(r.line)
            f.failures_live.append((r.line, total))
            continue
        if r.action == "allocate":
            if r.size == 0:
                f.zero_byte_allocations += 1
            else:
                low = 1
                while low * 2 <= r.size:
                    low *= 2
                f.histogram[low] = f.histogram.get(low, 0) + 1
            if r.pointer in live:
                old_size, old_thread, old_stream = live.pop(r.pointer)
                zero = old_size == 0 or r.size == 0
                name = "allocate_live_pointer_zero_size" if zero else "allocate_live_pointer"
                f.anomalies[name].append(r.line)
                total -= old_size
                by_thread[old_thread] -= old_size
                by_stream[old_stream] -= old_size
            live[r.pointer] = (r.size, r.thread, r.stream)
            total += r.size
            by_thread[r.thread] += r.size
            by_stream[r.stream] += r.size
        else:
            if r.pointer not in live:
                f.anomalies["free_unknown_pointer"].append(r.line)
                continue
            old_size, old_thread, old_stream = live.pop(r.pointer)
            if old_size != r.size:
                f.anomalies["free_size_mismatch"].append(r.line)
            total -= old_size
            by_thread[old_thread] -= old_size
            by_stream[old_stream] -= old_size
        if total > f.peak_bytes:
            f.peak_bytes, f.peak_line = total, r.line
        for key, value in by_thread.items():
            f.thread_peak[key] = max(f.thread_peak.get(key, 0), value)
        for key, value in by_stream.items():
            f.stream_peak[key] = max(f.stream_peak.get(key, 0), value)
    for size, _, _ in live.values():
        if size:
            f.live_end_count += 1
            f.live_end_bytes += size
        else:
            f.zero_byte_live_end += 1
    return f
