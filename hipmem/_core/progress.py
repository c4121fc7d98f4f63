"""The one progress-callback type. Libraries never draw: they call this; the CLI draws bars.

Here too is the one timer thread a progress display may need (`heartbeat`), so that the command
line, which only renders, starts no thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol


class ProgressCallback(Protocol):
    """`done` of `total` units (None when unknown); `label` says what is being worked on."""

    def __call__(self, done: int, total: int | None, label: str = "") -> None: ...


def no_progress(done: int, total: int | None, label: str = "") -> None:
    """The callback for callers that want none."""
    return None


@contextmanager
def heartbeat(
    progress: ProgressCallback, beat: Callable[[], None], period_s: float
) -> Iterator[ProgressCallback]:
    """`progress`, with `beat` called every `period_s` seconds on a thread of its own until the
    block ends (however it ends): a display can say it is alive while the work reports nothing
    (a cluster starting). `beat` never runs while the returned callback does, so neither sees
    the other's state half changed, nor cuts the other's line."""
    lock = threading.Lock()
    stop = threading.Event()

    def guarded(done: int, total: int | None, label: str = "") -> None:
        with lock:
            progress(done, total, label)

    def beating() -> None:
        while not stop.wait(period_s):
            with lock:
                beat()

    thread = threading.Thread(target=beating, name="progress-heartbeat", daemon=True)
    thread.start()
    try:
        yield guarded
    finally:
        stop.set()
        thread.join()
