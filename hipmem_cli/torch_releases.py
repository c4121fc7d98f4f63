"""`replay --torch 2.11,2.14`: the releases asked for (each one's column is replayed by
hipmem.replay.engine.releases)."""

from __future__ import annotations

from ..replay.errors import ReplayUsageError


def split_releases(torch: str | None, capacity: bool) -> list[str | None]:
    """`2.11,2.14` -> ["2.11", "2.14"]; none given -> [None] (the search order decides)."""
    releases: list[str | None] = [n.strip() for n in (torch or "").split(",") if n.strip()]
    if len(releases) > 1 and capacity:
        raise ReplayUsageError("--find-capacity searches with one PyTorch: give one --torch")
    return releases or [None]
