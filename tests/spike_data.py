"""Logs with a one-op spike, the case a strided picture misses (issue 38): the requested bytes
jump for one op and fall back at the next, in a trace long enough to be thinned.

- `spike_csv`: an RMM log on two streams, a sawtooth of small buffers, and one large
  allocation freed by the row after it.
- `spike_snapshot`: the committed train-default snapshot (recorded on the H200) repeated, with
  one large `alloc` and its `free_completed` added in the middle of a copy.
"""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path

from hipmem.replay.snapshot import load_snapshot_dict

SNAPSHOT = Path(__file__).resolve().parent / "data" / "snapshots" / "train-default.pickle.gz"
SPIKE_BYTES = 3 << 30


def spike_csv(path: Path, rows: int = 30_000, spike_row: int = 17_004) -> Path:
    """Write the log; the spike is allocated at row `spike_row` (0-based, after the header)
    and freed at the next row."""
    lines = ["Thread,Time,Action,Pointer,Size,Stream"]
    live: list[tuple[int, int, int]] = []  # (pointer, size, stream)
    pointer = 0x7F0000000000
    for row in range(rows):
        seconds = row * 1e-5
        stamp = f"04:{int(seconds // 60) % 60:02d}:{seconds % 60:09.6f}"
        if row == spike_row:
            lines.append(f"1,{stamp},allocate,0x7e0000000000,{SPIKE_BYTES},0")
        elif row == spike_row + 1:
            lines.append(f"1,{stamp},free,0x7e0000000000,{SPIKE_BYTES},0")
        elif row % 200 < 100 or not live:  # grow for 100 rows, shrink for 100
            stream = 0 if row % 3 else 0x55
            pointer += 1 << 20
            size = (1 + row % 7) << 20
            lines.append(f"1,{stamp},allocate,{pointer:#x},{size},{stream:#x}")
            live.append((pointer, size, stream))
        else:
            freed, size, stream = live.pop()
            lines.append(f"1,{stamp},free,{freed:#x},{size},{stream:#x}")
    path.write_text("\n".join(lines) + "\n")
    return path


def spike_snapshot(path: Path, copies: int = 8) -> Path:
    """Write the snapshot: train-default's trace `copies` times, each later than the one
    before, with a SPIKE_BYTES alloc and its free_completed in the middle of copy 4."""
    data = load_snapshot_dict(SNAPSHOT)
    trace = data["device_traces"][0]
    span_us = trace[-1]["time_us"] - trace[0]["time_us"] + 1
    tiled = []
    for copy in range(copies):
        entries = [{**entry, "time_us": entry["time_us"] + copy * span_us} for entry in trace]
        if copy == copies // 2:
            middle = len(entries) // 2 + 8
            at_us = entries[middle]["time_us"]
            frames = [{"name": "spike", "filename": "/work/spike.py", "line": 38}]
            spike = {"addr": 0x7E0000000000, "size": SPIKE_BYTES, "stream": 0, "time_us": at_us}
            entries[middle:middle] = [  # as PyTorch records a block in a segment of its own
                {**spike, "action": "segment_alloc", "frames": frames},
                {**spike, "action": "alloc", "frames": frames},
                {**spike, "action": "free_requested", "frames": frames},
                {**spike, "action": "free_completed", "frames": frames},
                {**spike, "action": "segment_free", "frames": frames},
            ]
        tiled += entries
    data["device_traces"] = [tiled]
    with gzip.open(path, "wb", compresslevel=1) as out:
        pickle.dump(data, out, protocol=4)
    return path
