"""Writing an `AllocationLog` as RMM's logging_resource_adaptor CSV, so RMM's own tools (its
replay benchmark, scripts written for its logs) read the same events.

The format is RMM 24.12's (printf era): `Thread,Time,Action,Pointer,Size,Stream`, a failed
allocation's pointer as `(nil)`, the default stream as `0`, other streams and pointers in hex,
time of day with microseconds. What RMM's format cannot carry is left out: a PyTorch
snapshot's segments and recorded reserved memory, its stack frames and allocator settings,
and an `oom` entry's free device memory. One source is one file; several (a snapshot of
several devices) are written as rmm names them, `<name>.dev<N>.csv[.gz]`.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from hipmem._core.atomic_write import atomic_outputs, naming_write_errors
from hipmem._core.output_files import check_output_file

from ..errors import ReplayUsageError
from .events import ACTION_NAMES, AllocationLog

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"
_US_PER_DAY = 86_400 * 10**6
_ROWS_PER_WRITE = 1 << 16


def check_output(path: Path) -> str:
    """Refuse, before a log is read, an output that could not be written (its suffix, a
    directory, a folder where no file can be created); the suffix."""
    suffix = next((s for s in (".csv.gz", ".csv") if path.name.endswith(s)), None)
    if suffix is None:
        raise ReplayUsageError("must end in .csv or .csv.gz", parameter="output", value=str(path))
    check_output_file(path, parameter="output")
    return suffix


def output_paths(log: AllocationLog, path: Path) -> list[Path]:
    """Where each source of `log` goes: `path` itself, or one `.dev<N>` file per source;
    every one checked writable before any is written."""
    suffix = check_output(path)
    if len(log.sources) == 1:
        return [path]
    devices = [r.device for r in log.recordings] or list(range(len(log.sources)))
    stem = path.name[: -len(suffix)]
    paths = [path.with_name(f"{stem}.dev{device}{suffix}") for device in devices]
    for each in paths:
        check_output_file(each, parameter="output")
    return paths


def write_rmm_csv(log: AllocationLog, path: Path) -> list[Path]:
    """Write every source of `log` as an RMM CSV, all files or none (each written beside its
    target, renamed only when all are); the paths written."""
    paths = output_paths(log, path)
    file_index = log.events["file_index"].to_numpy()
    with atomic_outputs(paths) as temps:  # several devices: all files or none
        for index, (target, tmp) in enumerate(zip(paths, temps, strict=True)):
            rows = np.flatnonzero(file_index == index)
            opener = gzip.open if target.name.endswith(".gz") else open
            with (
                naming_write_errors(target),
                opener(tmp, "wt", encoding="ascii", newline="") as out,
            ):
                out.write(HEADER)
                for start in range(0, len(rows), _ROWS_PER_WRITE):
                    out.write(_lines(log, rows[start : start + _ROWS_PER_WRITE]))
    return paths


def _lines(log: AllocationLog, rows: np.ndarray) -> str:
    events = log.events
    threads = events["thread"].to_numpy()[rows]
    time_us = events["time_ns"].to_numpy()[rows] // 1000
    actions = events["action"].to_numpy()[rows]
    pointers = events["pointer"].to_numpy()[rows]
    sizes = events["size_bytes"].to_numpy()[rows]
    streams = events["stream"].to_numpy()[rows]
    out = []
    for thread, t_us, action, pointer, size, stream in zip(
        threads, time_us, actions, pointers, sizes, streams, strict=True
    ):
        of_day = int(t_us) % _US_PER_DAY
        seconds, micros = divmod(of_day, 10**6)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micros:06d}"
        where = f"{int(pointer):#x}" if pointer else "(nil)"
        stream_text = f"{int(stream):#x}" if stream else "0"
        out.append(f"{thread},{clock},{ACTION_NAMES[int(action)]},{where},{size},{stream_text}\n")
    return "".join(out)
