"""Ctrl-C during a replay: the loop is asked to stop, and every byte it holds goes back first.

The loops run in threads of their own, so that the main thread is free to take the
KeyboardInterrupt, ask the loop to stop, and wait until it has returned its memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_cancellable(work: Callable[[], None], cancel: Callable[[], None]) -> None:
    """Run native work in a thread so that Ctrl-C can ask it to stop and return every byte."""
    errors: list[BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            work()
        except BaseException as err:  # pragma: no cover - ctypes calls do not raise
            errors.append(err)
        finally:
            done.set()

    threading.Thread(target=target, name="hipmem-replay", daemon=True).start()
    try:
        wait(done)
    except KeyboardInterrupt:
        cancel()
        wait_through_interrupts(done)
        raise
    if errors:
        raise errors[0]


def wait(done: threading.Event) -> None:
    # Event.wait, not Thread.join: a join interrupted by Ctrl-C can report a running thread
    # as finished (CPython before 3.13), and the caller would go on while memory is in use.
    while not done.wait(0.1):
        pass


def wait_through_interrupts(done: threading.Event) -> None:
    # The work is returning memory: a second Ctrl-C must not abandon it half way.
    while True:
        try:
            wait(done)
            return
        except KeyboardInterrupt:
            continue
