"""Which lines of a results file answer this sweep's pairs, and which pairs run again.

A pair is answered by the latest line of its key (the log's content hash as the workers
computed it now, the spec, the task, the settings) when that line is a checked record
(`records.py`) that says `ok`. A plain replay is also answered by a capacity search of the same
log and spec whose settings extend the replay's (the search replays the log too).

Only lines that can answer this sweep are kept: memory is at most two records a pair, whatever
the file holds. A line of one of this sweep's logs (by path) written when that log had other
content is named when its pair runs again: the log changed since.
"""

from __future__ import annotations

from typing import Any

from .records import STATUS_OK, TASK_CAPACITY, TASK_REPLAY
from .results import PairKey, ReadBack, ResultsFile


class Resume:
    """The records of a results file that answer a sweep of these logs (by content hash and
    path), specs, task and settings."""

    def __init__(
        self, paths: list[str], hashes: list[str], specs: list[str], task: str, settings: str
    ) -> None:
        self._hash_of = dict(zip(paths, hashes, strict=True))
        self._hashes = {h for h in hashes if h}
        self._specs = set(specs)
        self._task, self._settings = task, settings
        self._changed: dict[tuple[str, str], str] = {}  # (path, spec) -> the latest such line
        self._read = ReadBack()

    def read(self, results: ResultsFile) -> None:
        self._read = results.read(self._slot, self._unused)

    def record(self, sha256: str, spec: str) -> dict[str, Any] | None:
        """The `ok` record that answers this pair, if any."""
        for slot in (
            PairKey(sha256, spec, self._task, self._settings),
            PairKey(sha256, spec, TASK_CAPACITY, self._settings + ",*"),
        ):
            found = self._read.records.get(slot)
            if found is not None and found["status"] == STATUS_OK:
                return found
        return None

    def skipped(self, again: list[tuple[str, str]]) -> ReadBack:
        """The lines not used: those that are no record hipmem wrote, then the lines of logs
        that changed since, for the pairs (path, spec) that run `again`."""
        named = ReadBack(skipped=self._read.skipped, places=list(self._read.places))
        for path, spec in again:
            place = self._changed.get((path, spec))
            if place is not None:
                named.skip(place, f"{path} has changed since this line was written (its "
                           "SHA-256 differs): its pair runs again")  # fmt: skip
        return named

    def _slot(self, key: PairKey) -> PairKey | None:
        """Where a line of this key is kept (its latest line counts), or None: not this
        sweep's. The capacity searches that answer a replay share one slot per pair."""
        if key.log_sha256 not in self._hashes or key.spec not in self._specs:
            return None
        if (key.task, key.settings) == (self._task, self._settings):
            return key
        if self._answers_replay(key):
            return PairKey(key.log_sha256, key.spec, TASK_CAPACITY, self._settings + ",*")
        return None

    def _answers_replay(self, key: PairKey) -> bool:
        return (
            self._task == TASK_REPLAY
            and key.task == TASK_CAPACITY
            and key.settings.startswith(self._settings + ",")
        )

    def _unused(self, record: dict[str, Any], place: str) -> None:
        """A checked line no pair of this sweep uses: one of its logs as it was before?"""
        now = self._hash_of.get(record["log"])
        if now and now != record["log_sha256"] and record["spec"] in self._specs:
            key = PairKey(record["log_sha256"], record["spec"], record["task"], record["settings"])
            if (key.task, key.settings) == (self._task, self._settings) or self._answers_replay(
                key
            ):
                self._changed[record["log"], record["spec"]] = place
