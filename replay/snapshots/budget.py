"""What a snapshot may make, from the size of its file: a small file stays small.

gzip inflates a byte into a thousand, and pickle's memo lets two bytes add one more reference
to an object already made, so caps on decompressed bytes and objects alone let a 29 KB
`.pickle.gz` ask for 15 million objects (2.9 GB before its refusal), and a 6 KB one for 2.2
GB of empty memo slots. So what the reader makes is bounded by the file's size on disk as
well, with a floor far above what a real snapshot of that size needs, under the absolute caps
(`reader.py`, `snapshot_file.py`):

| bound | per byte of the file | at least | at most |
|---|---|---|---|
| pickle bytes once decompressed | 100 | 64 MiB | 2 GiB (`HIPMEM_SNAPSHOT_MAX_BYTES`) |
| objects held at once (segments, blocks, frames, memo, stack) | 8 | 1,000,000 | 16,000,000 |
| trace entries, per device and all devices together | 4 | 1,000,000 | 20,000,000; 50,000,000 |

Real snapshots (tests/data/snapshots, PyTorch 2.11, gzip) inflate 6 to 10 times and hold
0.2 to 0.7 objects at once and 0.11 to 0.2 trace entries per byte of their file (22,330
objects at most); PyTorch shares each distinct frame, which pickle writes once, so segments
and frames stay far below a million objects. A plain pickle is never bound by these (each
object or entry costs it a byte or more). Setting `HIPMEM_SNAPSHOT_MAX_BYTES` vouches for the
file: it replaces the inflation bound. So a file of 100 KB costs at most 64 MiB of pickle,
a million objects (each under a few hundred bytes) and a million entries, whatever it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from hipmem._core.byte_sizes import MiB

INFLATION_PER_FILE_BYTE = 100
HELD_OBJECTS_PER_FILE_BYTE = 8
TRACE_ENTRIES_PER_FILE_BYTE = 4
MIN_PICKLE_BYTES = 64 * MiB
MIN_HELD_OBJECTS = 1_000_000
MIN_TRACE_ENTRIES = 1_000_000


@dataclass(frozen=True)
class SnapshotBudget:
    """The bounds for one snapshot file of `file_bytes` bytes on disk. `sized`: the bounds
    (of "bytes", "objects", "entries") that the file's size set, rather than an absolute cap."""

    file_bytes: int
    pickle_bytes: int
    held_objects: int
    trace_entries: int  # per device
    total_trace_entries: int  # all devices, a list shared by several once for each
    sized: frozenset[str]

    def explained(self, message: str) -> str:
        """`message`, of a bound passed, with what the bound is for this file's size."""
        rules = {
            "bytes": ("bytes once decompressed", INFLATION_PER_FILE_BYTE, MIN_PICKLE_BYTES),
            "objects": ("objects held", HELD_OBJECTS_PER_FILE_BYTE, MIN_HELD_OBJECTS),
            "entries": ("trace entries", TRACE_ENTRIES_PER_FILE_BYTE, MIN_TRACE_ENTRIES),
        }
        for bound, (words, per_byte, least) in rules.items():
            passed = words in message or (bound == "objects" and "blocks" in message)
            if passed and bound in self.sized:
                return (
                    f"{message} (the bound for a file of {self.file_bytes:,} bytes: "
                    f"{per_byte} per byte, at least {least:,}; real snapshots need under "
                    f"{'11' if bound == 'bytes' else '1'} per byte)"
                )
        return message


def budget_for(
    file_bytes: int,
    *,
    max_pickle_bytes: int,
    vouched: bool,
    max_held_objects: int,
    max_trace_entries: int,
    max_total_entries: int,
) -> SnapshotBudget:
    """The bounds for a file of `file_bytes` under the absolute caps given; `vouched`: the
    user set the decompressed cap (HIPMEM_SNAPSHOT_MAX_BYTES), which then holds alone."""
    inflated = max(MIN_PICKLE_BYTES, int(INFLATION_PER_FILE_BYTE * file_bytes))
    held = max(MIN_HELD_OBJECTS, int(HELD_OBJECTS_PER_FILE_BYTE * file_bytes))
    entries = max(MIN_TRACE_ENTRIES, int(TRACE_ENTRIES_PER_FILE_BYTE * file_bytes))
    sized = {"bytes"} if inflated < max_pickle_bytes and not vouched else set()
    sized |= {"objects"} if held < max_held_objects else set()
    sized |= {"entries"} if entries < max_trace_entries else set()
    return SnapshotBudget(
        file_bytes=file_bytes,
        pickle_bytes=max_pickle_bytes if vouched else min(inflated, max_pickle_bytes),
        held_objects=min(held, max_held_objects),
        trace_entries=min(entries, max_trace_entries),
        total_trace_entries=min(entries, max_total_entries),
        sized=frozenset(sized),
    )
