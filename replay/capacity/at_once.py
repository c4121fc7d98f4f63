"""Several searches at once, one per core: RMM's resources on the virtual GPU.

Each replay there is a driver process of its own on a virtual GPU of its own (replay/rmm/
virtual.py), so the searches of pool, arena and binning share nothing and may run side by
side; what each finds is what it finds alone. A search on a real GPU or on host memory shares
the device or the machine's memory with the others, so those stay one at a time (callers
pass only the virtual ones here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run_each(tasks: Sequence[Callable[[], T]], workers: int | None = None) -> list[T]:
    """Each task's answer, in the tasks' order, at most `workers` (the cores) at a time. A
    task's error is raised here, the tasks not yet started dropped. Threads suffice: a task
    waits on its driver processes, not on Python."""
    workers = min(len(tasks), workers or cores())
    if workers <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hipmem-search") as pool:
        futures = [pool.submit(task) for task in tasks]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            raise
