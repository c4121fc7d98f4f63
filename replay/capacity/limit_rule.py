"""`--find-capacity` by `limit=` of RMM's resources on the virtual GPU, by RMM's rule of a limit.

`limit=` puts RMM's `limiting_resource_adaptor` on top of the resource (rmm_replay.cpp). The
adaptor counts each request rounded up to its alignment (256 bytes, CUDA_ALLOCATION_ALIGNMENT:
its default, in 24.12 and 25.4 alike), refuses an allocation that would take the count past
the limit, and passes every other call on unchanged. Until it refuses, the resource below
sees exactly the calls it sees with no limit; and a replay on the virtual GPU is one thread in
the log's order on a stand-in runtime, the same every time. So a limit L replays the log with
no failure if and only if the replay at a limit it never reaches does, and the program's
peak of rounded live bytes (what the adaptor counts) is at most L.

The search (replay/capacity/search.py) then makes one real replay at the smallest candidate
at or above that peak and answers its other probes by the rule: the same probes, the same
answer, as replaying each (an arena's search of a 1 M-event log took 18 replays). The size
found is still replayed `confirm_runs` more times, and one step below it must fail for real
(where it is not below the log's own peak).
Where a real replay disagrees (or that first one fails: the resource itself refused), the
rule does not decide, and the search replays every probe as before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..engine.program import OP_ALLOCATE, ReplayProgram

ALIGNMENT_BYTES = 256  # rmm::CUDA_ALLOCATION_ALIGNMENT, the adaptor's default alignment


class RuleBroken(Exception):
    """A real replay disagreed with the rule: search by real replays instead."""


def counted_peak_bytes(program: ReplayProgram) -> int:
    """The most the limiting adaptor counts at once over the program: every op's size rounded
    up to the alignment, added at an allocate and taken off at its free (a free op carries its
    allocate's size; a recorded-failed request is an allocate and a free, counted too)."""
    if not len(program.op):
        return 0
    rounded = -(-program.size_bytes // ALIGNMENT_BYTES) * ALIGNMENT_BYTES
    counted = np.cumsum(np.where(program.op == OP_ALLOCATE, rounded, -rounded), dtype=np.int64)
    return max(int(counted.max()), 0)


class LimitRule:
    """Answers a limit's probe by the rule, after one real replay (`replays`); raises
    `RuleBroken` where a real replay disagrees."""

    def __init__(
        self, program: ReplayProgram, replays: Callable[[int], bool], resolution_bytes: int
    ) -> None:
        self.peak_bytes = counted_peak_bytes(program)
        self._requested_bytes = program.peak_requested_bytes
        self._replays, self._step = replays, resolution_bytes
        # The smallest candidate the adaptor never refuses at: replayed for real once.
        self.first_bytes = max(-(-self.peak_bytes // resolution_bytes), 1) * resolution_bytes
        self._unlimited_ok: bool | None = None

    def replays(self, size_bytes: int) -> bool:
        if self._unlimited_ok is None:
            self._unlimited_ok = self._replays(self.first_bytes)
        if not self._unlimited_ok:  # refused below the limit (or the rule is wrong): no rule
            raise RuleBroken(f"{self.first_bytes} bytes, at or above the rule's peak, failed")
        return size_bytes >= self.peak_bytes

    def check(self, found_bytes: int) -> None:
        """The size found must be the rule's, and one step below it must fail for real."""
        if found_bytes != self.first_bytes:
            raise RuleBroken(f"{found_bytes} bytes found, {self.first_bytes} by the rule")
        below = found_bytes - self._step
        # Below the log's own peak nothing replays: no need to see it
        if below >= self._requested_bytes and self._replays(below):
            raise RuleBroken(f"{below} bytes replayed, below the rule's {self.peak_bytes}")
