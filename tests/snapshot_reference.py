"""An independent, plain-Python reading of PyTorch memory snapshots (dicts and loops, no numpy,
no hipmem), used by the tests to derive every expected figure. The snapshots in
tests/data/snapshots/ are the project's own recordings, so plain `pickle.load` is fine here."""

from __future__ import annotations

import gzip
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SNAPSHOTS = Path(__file__).parent / "data" / "snapshots"
NAMES = (
    "train-default",
    "train-expandable",
    "train-late",
    "infer-default",
    "infer-full",
    "multistream",
    "oom",
    "multistream-oom",
    "multistream-oom-expandable",
)
# Recorded from the process's first allocation: every allocation and segment is in the trace.
COMPLETE = (
    "train-default",
    "train-expandable",
    "infer-full",
    "multistream",
    "oom",
    "multistream-oom",
    "multistream-oom-expandable",
)
# Complete, and no out-of-memory error recorded: `recommend` answers them on the device given
# (one that recorded an error is answered under the conditions inferred from it, issue #50:
# tests/replay/explain/test_recorded_conditions.py).
UNCAPPED = tuple(name for name in COMPLETE if "oom" not in name)


def load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data: dict[str, Any] = pickle.loads(raw)
    return data


@dataclass
class DeviceFigures:
    allocates: int = 0  # alloc entries plus allocations made before recording
    frees: int = 0
    ooms: int = 0
    before_recording: int = 0
    peak_requested_bytes: int = 0
    peak_reserved_bytes: int = 0
    streams: set[int] = field(default_factory=set)
    # (action, pointer, size, stream) in log order, allocations before recording first
    events: list[tuple[str, int, int, int]] = field(default_factory=list)


def figures(path: Path) -> dict[int, DeviceFigures]:
    data = load(path)
    result = {}
    for device, trace in enumerate(data["device_traces"]):
        segments = [s for s in data["segments"] if s["device"] == device]
        if trace or segments:
            result[device] = _device(trace, segments)
    return result


def _device(trace: list[dict[str, Any]], segments: list[dict[str, Any]]) -> DeviceFigures:
    f = DeviceFigures()
    # First pass: which addresses were allocated before recording began.
    seen_alloc: dict[int, int] = {}
    early: list[tuple[int, int, int]] = []
    for entry in trace:
        if entry["action"] == "alloc":
            seen_alloc[entry["addr"]] = entry["size"]
        elif entry["action"] == "free_completed":
            if entry["addr"] in seen_alloc:
                del seen_alloc[entry["addr"]]
            else:
                early.append((entry["addr"], entry["size"], entry["stream"]))
    for segment in segments:
        for block in segment["blocks"]:
            active = block["state"] in ("active_allocated", "active_pending_free")
            if active and block["address"] not in seen_alloc:
                early.append((block["address"], block["requested_size"], segment["stream"]))
    f.before_recording = len(early)

    live = 0
    for address, size, stream in early:
        f.events.append(("allocate", address, size, stream))
        live += size
    f.peak_requested_bytes = live
    sizes = {address: size for address, size, _ in early}
    reserved_changes = []
    for entry in trace:
        action = entry["action"]
        if action == "alloc":
            f.events.append(("allocate", entry["addr"], entry["size"], entry["stream"]))
            sizes[entry["addr"]] = entry["size"]
            live += entry["size"]
        elif action == "free_completed":
            f.events.append(("free", entry["addr"], entry["size"], entry["stream"]))
            live -= sizes.pop(entry["addr"])
        elif action == "oom":
            f.events.append(("allocate failure", 0, entry["size"], entry["stream"]))
        elif action in ("segment_alloc", "segment_map"):
            reserved_changes.append(entry["size"])
        elif action in ("segment_free", "segment_unmap"):
            reserved_changes.append(-entry["size"])
        f.peak_requested_bytes = max(f.peak_requested_bytes, live)
    f.allocates = sum(1 for e in f.events if e[0] == "allocate")
    f.frees = sum(1 for e in f.events if e[0] == "free")
    f.ooms = sum(1 for e in f.events if e[0] == "allocate failure")
    f.streams = {e[3] for e in f.events}

    reserved = sum(s["total_size"] for s in segments) - sum(reserved_changes)
    f.peak_reserved_bytes = reserved
    for change in reserved_changes:
        reserved += change
        f.peak_reserved_bytes = max(f.peak_reserved_bytes, reserved)
    return f
