"""Progress when stderr is not a terminal (a CI log, `2> file`, a pipe): a line now and then.

A bar redrawn in place means nothing in a log, so piped commands are silent by default
(`output.progress`). A command that works for minutes (`fleet`) asks for this instead: one
line when a new kind of work starts (its label says something else than the last one did, its
numbers aside), one when a kind of work is done, and in between at most one every `every_s`
seconds, so that a log shows the command is alive without a line per item. When nothing moves
for twice that (a cluster starting, a worker's first task importing its libraries), the last
line is said again with how long the command has been at it, so a log never goes quiet for
long while the command works. The timer that says it again runs below the command line
(`hipmem._core.progress.heartbeat`): this module only words the lines.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from hipmem._core.progress import ProgressCallback, heartbeat

_NUMBERS = re.compile(r"\d[\d,.]*")
STILL = "still working"  # the words of a line said again


class PipedProgress:
    """A progress callback that writes `TITLE: DONE/TOTAL LABEL` lines through `say`."""

    def __init__(self, title: str, every_s: float, say: Callable[[str], None]) -> None:
        self._title, self._every_s, self._say = title, every_s, say
        self._kind: str | None = None
        self._last = ""  # the last line said, to say again while nothing moves
        self._started = self._said_at = time.monotonic()

    def __call__(self, done: int, total: int | None, label: str = "") -> None:
        kind = _NUMBERS.sub("#", label)
        now = time.monotonic()
        if kind == self._kind and done != total and now - self._said_at < self._every_s:
            return
        self._kind = kind
        parts = (f"{self._title}:", _amount(done, total), label)
        self._last = " ".join(part for part in parts if part)
        self._tell(self._last, now)

    def heartbeat(self) -> None:
        """Say the last line again if nothing was said for twice `every_s`."""
        now = time.monotonic()
        if self._last and now - self._said_at >= 2 * self._every_s:
            self._tell(f"{self._last} ({STILL}, {now - self._started:.0f} s)", now)

    def _tell(self, line: str, now: float) -> None:
        self._said_at = now
        self._say(line)


def _amount(done: int, total: int | None) -> str:
    """`3/10`, `3` with no total, nothing before any count (a step starting)."""
    if total is None:
        return f"{done:,}" if done else ""
    return f"{done:,}/{total:,}"


@contextmanager
def piped_progress(
    title: str, every_s: float, say: Callable[[str], None]
) -> Iterator[ProgressCallback]:
    """A PipedProgress with its heartbeat checked every half period, stopped on the way out
    (however that is)."""
    lines = PipedProgress(title, every_s, say)
    with heartbeat(lines, lines.heartbeat, every_s / 2) as progress:
        yield progress
