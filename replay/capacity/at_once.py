"""Replays side by side, one per core: the one helper for work that waits on driver processes.

`run_each` runs tasks at once, at most one per core (or `workers`), answers in the tasks'
order: the searches of RMM's resources on the virtual GPU (replay/capacity/capacities.py) and
their confirming replays (replay/capacity/confirmation.py), and the grid of PyTorch allocator
settings (replay/settings/recommend.py). Each replay on the virtual GPU is a driver process of
its own on a virtual GPU of its own (replay/rmm/virtual.py, replay/virtual/gpu.py), so they
share nothing and may run side by side; what each finds is what it finds alone. A search on a
real GPU or on host memory shares the device or the machine's memory with the others, so those
stay one at a time (callers pass only the virtual ones here).

`CORES` counts RMM's replays running at once: each takes a core (`held`) and waits for one
when all are taken, so searches side by side, with their confirming replays, never run more
replays than there are cores; a replay made only in case it is needed (a search's next probe,
guessed) runs only on a core free at that moment (`take_spare`).

Ctrl-C (or any error) in one task, or in the thread waiting on them, drops the tasks not yet
started and stops RMM's replays of the others at their next one (`Stopped`): the command ends
within one replay, not after every search.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Stopped(Exception):
    """The tasks were asked to stop (another one failed, or Ctrl-C): no replay starts."""


class Cores:
    """The cores replays may take, one each."""

    def __init__(self, count: int) -> None:
        self._free = threading.Semaphore(count)
        self.stopping = threading.Event()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A core for one replay, waited for."""
        with self._free:
            if self.stopping.is_set():
                raise Stopped("stopped before this replay")
            yield

    def take_spare(self) -> bool:
        """A core if one is free now (True; `give_back` it), else none: for a replay made
        only in case it is needed."""
        if self.stopping.is_set():
            return False
        return self._free.acquire(blocking=False)

    def give_back(self) -> None:
        self._free.release()


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
            wait(futures, return_when=FIRST_EXCEPTION)  # a failure, or all done
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if failed:
                failed[0].result()  # raises its error
            return [future.result() for future in futures]
        except BaseException:
            # the others stop at their next replay; whoever asked first lets replays go on
            # again once every task here has ended (a run_each inside a task does not)
            asked = not CORES.stopping.is_set()
            CORES.stopping.set()
            for future in futures:
                future.cancel()
            _wait_through_interrupts(futures)
            if asked:
                CORES.stopping.clear()
            raise


def _wait_through_interrupts(futures: list[Future[T]]) -> None:
    """Until every started task has ended (a second Ctrl-C does not abandon them)."""
    while True:
        try:
            wait(futures)
            return
        except KeyboardInterrupt:
            continue


CORES = Cores(cores())
