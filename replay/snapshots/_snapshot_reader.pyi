# The C snapshot reader (csrc/snapshot_reader.c), built at install time by setup.py.
from typing import Any

def run(
    machine: Any,
    read: Any,
    max_bytes: int,
    max_cells: int,
    new_sink: Any,
    keep_frames: bool,
    sinks: dict[int, Any],
    consts: tuple[Any, ...],
    /,
) -> Any: ...
def device_segments(
    segments: Any, devices: int, max_visits: int, /
) -> dict[int, tuple[int, int, list[tuple[int, int, int]]]] | None: ...
