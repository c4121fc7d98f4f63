"""The one progress-callback type. Libraries never draw: they call this; the CLI draws bars."""

from __future__ import annotations

from typing import Protocol


class ProgressCallback(Protocol):
    """`done` of `total` units (None when unknown); `label` says what is being worked on."""

    def __call__(self, done: int, total: int | None, label: str = "") -> None: ...


def no_progress(done: int, total: int | None, label: str = "") -> None:
    """The callback for callers that want none."""
    return None
