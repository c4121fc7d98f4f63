"""Turn an allocation log into a replay program: the exact allocator calls to make, in order.

Each allocate gets a slot (its own number); each free names the slot of the allocate it
undoes. The replay loop then needs no pointer map: a slot index is an array index, in Python
or in the native core. The log's anomalies follow the live-bytes rules of `replay.analysis`
(applied through its `live_trace`, so the report and the replay cannot disagree):

- free of a pointer that is not live: reported, skipped;
- allocate at a pointer that is still live (its free is missing from the log): reported, and
  the earlier block is freed right before the new allocate, which replaces it. RMM logs
  zero-byte requests with a null pointer that is never freed, so each one "replaces" the
  one before; those are counted apart (`live_pointer_zero_size`) and cost nothing;
- zero-byte allocations: replayed (allocators accept 0 bytes and production made the call);
- `allocate failure` rows of an allocation log (RMM's): not replayed (production got no
  memory, so nothing later depends on them), counted;
- `oom` entries of a PyTorch snapshot (an `allocate failure` row of a source the snapshot
  reader recorded): replayed as the request it was, an allocate of its size and, right after,
  a free of the same slot ("recorded-failed"). Under the recorded conditions the allocator
  refuses it again (a failure of the replay, which the report marks as recorded); under a
  setting that avoids it the allocator serves it, and since the recorded run never held it,
  it is returned at once and no later event depends on it. Its bytes are not in `live_bytes`
  (the log's view: production never held them). PyTorch records the size it searched for,
  already rounded (`params.size()` in `c10/cuda/CUDACachingAllocator.cpp`), which rounds to
  itself again;
- allocations the log never frees: returned at the end of the replay, counted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from hipmem._core.freed_memory import release_freed_memory

from ..explain.requests import recorded_failed_rows
from ..logs.analysis import previous_allocations
from ..logs.events import ALLOCATE, ALLOCATE_FAILURE, FREE, AllocationLog, LineRef
from ..virtual.placement import placement_plan

OP_ALLOCATE = 0
OP_FREE = 1
_EXAMPLES = 5  # anomalies kept in full per kind; the rest are counted


@dataclass(frozen=True)
class AnomalyExample:
    """One place where the log does not replay literally."""

    anomaly: str  # the name `log inspect` uses (free_unknown_pointer, allocate_live_pointer)
    where: LineRef
    pointer: int

    def __str__(self) -> str:
        return f"{self.where}: {_EXAMPLE_TEXT[self.anomaly]} ({self.pointer:#x})"


_EXAMPLE_TEXT = {
    "free_unknown_pointer": "free of a pointer that is not live",
    "allocate_live_pointer": "allocate of a pointer that is already live",
}


@dataclass
class Anomalies:
    """What in the log does not replay literally, with the first few places each happened.

    Names and counting rules are `log inspect`'s (replay.analysis): "live at end" counts the
    allocations never freed that hold bytes; zero-byte ones are counted apart.
    """

    zero_byte_allocations: int = 0
    free_unknown_pointer: int = 0
    allocate_live_pointer: int = 0
    allocate_live_pointer_zero_size: int = 0
    allocate_failure: int = 0
    recorded_failed: int = 0  # snapshot `oom` requests, replayed (this module's docstring)
    live_at_end_count: int = 0
    live_at_end_bytes: int = 0
    zero_byte_live_at_end: int = 0
    examples: list[AnomalyExample] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "zero_byte_allocations": self.zero_byte_allocations,
            "free_unknown_pointer": self.free_unknown_pointer,
            "allocate_live_pointer": self.allocate_live_pointer,
            "allocate_live_pointer_zero_size": self.allocate_live_pointer_zero_size,
            "allocate_failure": self.allocate_failure,
            "recorded_failed": self.recorded_failed,
            "live_at_end": {"count": self.live_at_end_count, "bytes": self.live_at_end_bytes},
            "zero_byte_live_at_end": self.zero_byte_live_at_end,
            "examples": [
                {"anomaly": e.anomaly, **e.where.as_dict(), "pointer": e.pointer}
                for e in self.examples
            ],
        }


@dataclass(frozen=True)
class ReplayProgram:
    """Typed arrays, one entry per allocator call to make (`ops`)."""

    op: np.ndarray  # int8: OP_ALLOCATE or OP_FREE
    slot: np.ndarray  # int32: allocate's own slot, or the slot a free returns
    size_bytes: np.ndarray  # int64
    stream_index: np.ndarray  # int32, into `streams`
    thread_index: np.ndarray  # int32, into `threads`
    event_index: np.ndarray  # int64: the log row (position in log.events) the op comes from
    streams: np.ndarray  # uint64: logged stream ids (0 = default stream)
    threads: np.ndarray  # int64: logged thread ids
    slot_count: int
    live_bytes: np.ndarray  # int64: bytes the log holds after each op (requested, not reserved)
    log_events: int  # rows in the log, the unit of events/s (as in the C++ floor)
    anomalies: Anomalies
    # uint64 (size, offset) pairs: where the recording's driver put each segment, for the
    # virtual GPU (replay/virtual/placement.py); empty for an RMM log
    placement: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.uint64))

    @property
    def op_count(self) -> int:
        return len(self.op)

    @property
    def peak_requested_bytes(self) -> int:
        return int(self.live_bytes.max()) if len(self.live_bytes) else 0

    @property
    def peak_op(self) -> int:
        """The op after which the requested bytes peak (-1 for an empty program)."""
        return int(self.live_bytes.argmax()) if len(self.live_bytes) else -1


def build_program(log: AllocationLog) -> ReplayProgram:
    """Build the program of `log` by the rules in this module's docstring (vectorised)."""
    program = _build(log)
    release_freed_memory()  # the build's temporaries, each the length of the log
    return program


def _build(log: AllocationLog) -> ReplayProgram:
    events = log.events
    action = events["action"].to_numpy(dtype=np.int8)
    pointer = events["pointer"].to_numpy(dtype=np.uint64)
    size = events["size_bytes"].to_numpy(dtype=np.int64)
    n = len(action)
    is_alloc = action == ALLOCATE
    # Snapshot `oom` requests: an allocate and a free of a slot of their own.
    is_probe = recorded_failed_rows(log)
    has_slot = is_alloc | is_probe

    # The allocate each event meets at its pointer (analysis' rules), or -1.
    previous = previous_allocations(events)
    has_live_previous = previous >= 0
    matched_free = (action == FREE) & has_live_previous
    unknown_free = (action == FREE) & ~has_live_previous
    replacing = is_alloc & has_live_previous
    replacing_zero = replacing & ((size == 0) | (size[np.maximum(previous, 0)] == 0))

    slot_of_event = np.cumsum(has_slot, dtype=np.int64)
    slot_of_event -= 1
    # Narrow per-event counts and in-place sums: a million events, a few MB less each.
    emits = is_alloc.astype(np.int8)
    emits += replacing
    emits += matched_free
    emits += 2 * is_probe.astype(np.int8)
    first_op = np.cumsum(emits, dtype=np.int64)
    total = int(first_op[-1]) if n else 0
    first_op -= emits
    del emits

    op = np.empty(total, dtype=np.int8)
    slot = np.empty(total, dtype=np.int32)
    op_size = np.empty(total, dtype=np.int64)
    op_event = np.empty(total, dtype=np.int64)
    held = np.ones(total, dtype=bool)  # the op changes the bytes the log holds

    # Implicit frees of replaced blocks come first, then the allocate itself. Each kind of op
    # is placed a block of events at a time: no whole-length index arrays besides these.
    ops = (op, slot, op_size, op_event, held)
    places = (slot_of_event, size, first_op)
    _place(ops, places, replacing, OP_FREE, previous, None, True)
    _place(ops, places, is_alloc, OP_ALLOCATE, None, replacing, True)
    _place(ops, places, matched_free, OP_FREE, previous, None, True)
    _place(ops, places, is_probe, OP_ALLOCATE, None, None, False)
    _place(ops, places, is_probe, OP_FREE, None, 1, False)
    # The per-event indexes are done with: freed before the streams' and threads' codes
    del previous, slot_of_event, first_op, places, ops

    # Sorted distinct streams and threads, and each op's index into them
    streams, stream_index = _sorted_codes(events["stream"].to_numpy(dtype=np.uint64), op_event)
    threads, thread_index = _sorted_codes(events["thread"].to_numpy(dtype=np.int64), op_event)
    live_bytes = np.where(held, op_size, 0)
    np.negative(live_bytes, out=live_bytes, where=op == OP_FREE)
    np.cumsum(live_bytes, out=live_bytes)
    del held

    freed_slots = np.zeros(int(has_slot.sum()), dtype=bool)
    freed_slots[slot[op == OP_FREE]] = True
    never_freed_sizes = size[has_slot][~freed_slots]
    anomalies = Anomalies(
        zero_byte_allocations=int((is_alloc & (size == 0)).sum()),
        free_unknown_pointer=int(unknown_free.sum()),
        allocate_live_pointer=int((replacing & ~replacing_zero).sum()),
        allocate_live_pointer_zero_size=int(replacing_zero.sum()),
        allocate_failure=int((action == ALLOCATE_FAILURE).sum()),
        recorded_failed=int(is_probe.sum()),
        live_at_end_count=int((never_freed_sizes > 0).sum()),
        live_at_end_bytes=int(never_freed_sizes.sum()),
        zero_byte_live_at_end=int((never_freed_sizes == 0).sum()),
        examples=_examples(log, unknown_free, replacing & ~replacing_zero, pointer),
    )
    return ReplayProgram(
        op=op,
        slot=slot,
        size_bytes=op_size,
        stream_index=stream_index,
        thread_index=thread_index,
        event_index=op_event,
        streams=np.asarray(streams, np.uint64),
        threads=np.asarray(threads, np.int64),
        slot_count=int(has_slot.sum()),
        live_bytes=live_bytes,
        log_events=n,
        anomalies=anomalies,
        placement=placement_plan(log),
    )


_BLOCK_EVENTS = 1 << 16


def _sorted_codes(values: np.ndarray, op_event: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct `values` and, for each op, the index of its event's value among
    them (int32): np.unique's answer, a block at a time (a factorize of the whole column
    took 40 MiB for a million events; a log has a handful of streams and threads)."""
    distinct = np.unique(values[:_BLOCK_EVENTS])
    for start in range(_BLOCK_EVENTS, len(values), _BLOCK_EVENTS):
        block = np.unique(values[start : start + _BLOCK_EVENTS])
        if not np.isin(block, distinct, assume_unique=True).all():
            distinct = np.union1d(distinct, block)
    codes = np.empty(len(op_event), dtype=np.int32)
    for start in range(0, len(op_event), _BLOCK_EVENTS):
        at = op_event[start : start + _BLOCK_EVENTS]
        codes[start : start + _BLOCK_EVENTS] = np.searchsorted(distinct, values[at])
    return distinct, codes


def _place(
    ops: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    places: tuple[np.ndarray, np.ndarray, np.ndarray],
    rows: np.ndarray,
    kind: int,
    source: np.ndarray | None,
    shift: np.ndarray | int | None,
    held: bool,
) -> None:
    """Write one kind of op for each event of `rows` (a mask): at the event's first op (plus
    `shift`: an int, or a per-event mask of ops placed before it), the slot and size of
    `source[event]` (the event's allocate) or of the event itself."""
    op, slot, op_size, op_event, held_ops = ops
    slot_of_event, size, first_op = places
    for start in range(0, len(rows), _BLOCK_EVENTS):
        event = start + np.flatnonzero(rows[start : start + _BLOCK_EVENTS])
        of = event if source is None else source[event]
        at = first_op[event]
        if isinstance(shift, np.ndarray):
            at += shift[event]
        elif shift:
            at += shift
        op[at], slot[at], op_size[at], op_event[at] = kind, slot_of_event[of], size[of], event
        if not held:
            held_ops[at] = False


def _examples(
    log: AllocationLog, unknown_free: np.ndarray, replacing: np.ndarray, pointer: np.ndarray
) -> list[AnomalyExample]:
    found = []
    for mask, anomaly in (
        (unknown_free, "free_unknown_pointer"),
        (replacing, "allocate_live_pointer"),
    ):
        for i in np.flatnonzero(mask)[:_EXAMPLES]:
            found.append(AnomalyExample(anomaly, log.line_ref(int(i)), int(pointer[i])))
    return found


def logged_allocation_sizes(program: ReplayProgram) -> np.ndarray:
    """The sizes of the allocations the log made and was granted: every allocate op but the
    replayed out-of-memory requests (an allocate whose very next op frees its slot for the
    same log row: this module's docstring). The grid of allocator settings is derived from
    these, as before such requests were replayed."""
    op, slot, event = program.op, program.slot, program.event_index
    alloc = op == OP_ALLOCATE
    probe = np.zeros(len(op), dtype=bool)
    probe[:-1] = (
        alloc[:-1] & (op[1:] == OP_FREE) & (slot[1:] == slot[:-1]) & (event[1:] == event[:-1])
    )
    sizes: np.ndarray = program.size_bytes[alloc & ~probe]
    return sizes


def program_arrays(program: ReplayProgram) -> dict[str, np.ndarray]:
    """The program as the C loops read it (the native core, the torch worker, the virtual
    GPU's drivers): contiguous arrays of the types they declare."""
    return {
        "op": np.ascontiguousarray(program.op, dtype=np.int8),
        "slot": np.ascontiguousarray(program.slot, dtype=np.int32),
        "size": np.ascontiguousarray(program.size_bytes, dtype=np.int64),
        "stream": np.ascontiguousarray(program.stream_index, dtype=np.int32),
        "thread": np.ascontiguousarray(program.thread_index, dtype=np.int32),
        "stream_ids": np.ascontiguousarray(program.streams, dtype=np.uint64),
        "placement": np.ascontiguousarray(program.placement, dtype=np.uint64),
    }


def on_default_stream(program: ReplayProgram) -> ReplayProgram:
    """The same program with every call on the default stream."""
    return dataclasses.replace(
        program,
        stream_index=np.zeros(program.op_count, np.int32),
        streams=np.zeros(1, np.uint64),
    )
