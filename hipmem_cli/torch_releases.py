"""`replay --torch 2.11,2.14`: the releases asked for (each one's column is replayed by
hipmem.replay.engine.releases), and the line that says a snapshot does not name its release."""

from __future__ import annotations

import os

from ..replay.engine.resources import ResourceSpec
from ..replay.errors import ReplayUsageError
from ..replay.pytorch.allocator import TORCH_ENV
from ..replay.pytorch.fetch import fetched_versions
from . import output


def split_releases(torch: str | None, capacity: bool) -> list[str | None]:
    """`2.11,2.14` -> ["2.11", "2.14"]; none given -> [None] (the search order decides)."""
    releases: list[str | None] = [n.strip() for n in (torch or "").split(",") if n.strip()]
    if len(releases) > 1 and capacity:
        raise ReplayUsageError("--find-capacity searches with one PyTorch: give one --torch")
    return releases or [None]


def say_recording_release(torch: str | None, virtual: list[ResourceSpec]) -> None:
    """A snapshot does not record the PyTorch that wrote it: `settings=recorded` reproduces its
    settings, and the release is the user's to name (unless it was)."""
    if torch is not None or os.environ.get(TORCH_ENV):
        return
    if any(spec.options.get("settings") == "recorded" for spec in virtual):
        output.note(
            "the snapshot does not say which PyTorch recorded it: give that release with "
            "--torch VERSION (fetched: " + (", ".join(fetched_versions()) or "none") + ")"
        )
