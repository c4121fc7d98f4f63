"""Fleets of allocation logs made from the real ones in tests/data/real: windows, shifts, tiles.

A window is a run of a real log's rows (frees of blocks allocated before it are then frees
of unknown pointers, as in a log whose recording started late); a shift moves a log's times
and addresses (the same behaviour, other bytes: another content hash); a tile repeats a
log, each copy at later times and other addresses, with the blocks a copy left live freed
at its end, so a long log keeps the original's peak. Used by tests/replay/fleet/test_fleet.py and
benchmarks/bench_fleet.py.
"""

from __future__ import annotations

import gzip
from pathlib import Path

REAL = Path(__file__).resolve().parent / "data" / "real"
SNAPSHOTS = Path(__file__).resolve().parent / "data" / "snapshots"
HEADER = "Thread,Time,Action,Pointer,Size,Stream"
DAY_US = 86_400 * 1_000_000


def read_rows(path: Path) -> list[list[str]]:
    """The rows of a real log (Thread,Time,Action,Pointer,Size,Stream), header dropped."""
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    assert lines[0] == HEADER, f"{path}: unexpected header {lines[0]!r}"
    return [line.split(",") for line in lines[1:]]


def _time_us(text: str) -> int:
    clock, fraction = text.split(".")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return ((hours * 60 + minutes) * 60 + seconds) * 1_000_000 + int(fraction)


def _time_text(time_us: int) -> str:
    time_us %= DAY_US
    seconds, fraction = divmod(time_us, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"


def _pointer(text: str, offset: int) -> str:
    if text in ("(nil)", "0", "0x0"):  # a failed allocation's pointer stays null
        return text
    return hex(int(text, 16) + offset)


def write_log(path: Path, rows: list[list[str]]) -> Path:
    """Write rows as an RMM CSV (gzip when the name ends in .gz)."""
    text = "\n".join([HEADER, *(",".join(row) for row in rows)]) + "\n"
    data = gzip.compress(text.encode(), mtime=0) if path.name.endswith(".gz") else text.encode()
    path.write_bytes(data)
    return path


def window(rows: list[list[str]], start: int, count: int) -> list[list[str]]:
    return rows[start : start + count]


def shifted(rows: list[list[str]], seconds: int, pointer_offset: int) -> list[list[str]]:
    """Times later by `seconds` (wrapping at midnight as RMM's do), addresses moved."""
    later_us = seconds * 1_000_000
    return [
        [t, _time_text(_time_us(time) + later_us), action, _pointer(p, pointer_offset), size, s]
        for t, time, action, p, size, s in rows
    ]


def tiled(rows: list[list[str]], copies: int) -> list[list[str]]:
    """`copies` copies one after another, each freeing at its end what it left live."""
    span_us = _time_us(rows[-1][1]) - _time_us(rows[0][1]) + 1_000
    out: list[list[str]] = []
    for copy in range(copies):
        part = shifted(rows, copy * span_us // 1_000_000 + copy, copy << 44)
        live: dict[str, list[str]] = {}
        for row in part:
            out.append(row)
            if row[2] == "allocate":
                live[row[3]] = row
            elif row[2] == "free":
                live.pop(row[3], None)
        last_time = part[-1][1]
        for thread, _, _, pointer, size, stream in live.values():
            out.append([thread, last_time, "free", pointer, size, stream])
    return out


def real_fleet(folder: Path, *, windows: int = 1, shifts: int = 1, rows: int = 2000) -> list[Path]:
    """Windows and shifts of every real log, written into `folder`."""
    made: list[Path] = []
    for source in sorted(REAL.glob("*.csv.gz")):
        name = source.name.split(".")[0]
        all_rows = read_rows(source)
        step = max(1, (len(all_rows) - rows) // max(windows, 1))
        for k in range(windows):
            part = window(all_rows, k * step, rows)
            made.append(write_log(folder / f"{name}-window{k}.csv.gz", part))
        for k in range(shifts):
            moved = shifted(window(all_rows, 0, rows), 3600 * (k + 1), (k + 1) << 40)
            made.append(write_log(folder / f"{name}-shift{k}.csv", moved))
    return made
