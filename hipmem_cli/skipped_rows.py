"""How the rows of a log that could not be read are said, by every command that reads logs
(`log inspect`, `replay`, `--find-capacity`): one warning on stderr, and the `skipped_rows`
object of their `--json`."""

from __future__ import annotations

from hipmem._core.skipped_input import SHOWN_PLACES, describe_skipped

from ..replay.logs.events import AllocationLog
from . import output


def warn_skipped_rows(log: AllocationLog) -> None:
    """One warning for the rows that could not be read (`log inspect` and `replay` alike)."""
    if log.skipped_count:
        described = describe_skipped(log.skipped_count, log.skipped_places())
        output.skipped(described, "--strict makes this an error")
    for damaged in log.skipped[SHOWN_PLACES:]:  # where a damaged file ends is never left unsaid
        if damaged.reason.startswith("gzip data"):
            output.warning(f"{damaged.source}:{damaged.line}: {damaged.reason}")


def skipped_rows_json(log: AllocationLog) -> dict[str, object]:
    """The same `skipped_rows` object as `log inspect --json` prints."""
    return {
        "count": log.skipped_count,
        "first": [{"source": s.source, "line": s.line, "reason": s.reason} for s in log.skipped],
    }
