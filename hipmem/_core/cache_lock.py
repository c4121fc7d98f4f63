"""One writer at a time in a folder of the cache: `rocm fetch`, `torch fetch` and the fetches
on first use share downloads and trees, so a second one waits for the first, saying so."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def cache_lock(folder: Path, holder: str, notice: Callable[[str], None]) -> Iterator[None]:
    """Hold `folder`/fetch.lock; when another process holds it, `notice` a line naming
    `holder` (what takes the lock, e.g. "hipmem rocm fetch") and wait for it."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "fetch.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            notice(f"another {holder} is using {folder}; waiting for it to finish")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def held_elsewhere(folder: Path) -> bool:
    """Whether a process holds `folder`/fetch.lock now (a fetch under way); never waits."""
    try:
        with (folder / "fetch.lock").open("rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
    except OSError:
        return False  # no lock file: no fetch ever ran here
    return False
