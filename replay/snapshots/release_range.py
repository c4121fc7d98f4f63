"""Which PyTorch releases could have written a snapshot, read from the fields it holds.

A snapshot does not name the PyTorch that wrote it, and a release's allocator can answer
differently (on a held-out job, 2.14.1's allocator reserved 26,537,361,408 bytes under
`max_split_size_mb:128` where the 2.11 that recorded it reserved 26,581,401,600). But each
release writes fields the one before did not, and writes them always, whatever the job did:

| field                                             | written from |
|---------------------------------------------------|--------------|
| `external_annotations` (top level)                | 2.5          |
| `compile_context` (each trace entry)              | 2.8          |
| `graph_capture_record_stream_reuse` (settings)    | 2.9          |
| `user_metadata` (each trace entry)                | 2.10         |
| `pool_id` (each trace entry)                      | 2.12         |
| `max_cached_size` (allocator settings)            | 2.13         |
| `host_segments` (top level)                       | 2.14         |

Measured: `hipmem record --torch V` of one small script under 2.4.1, 2.9.1, 2.11.0, 2.12.1,
2.13.0 and 2.14.1 (each snapshot's keys), and for 2.5 to 2.8 and 2.10 the key strings that
`THCPModule_memorySnapshot` builds in each release's `libtorch_python.so`
(docs/pytorch-releases.md, "The snapshot's own release"; the snapshots are in
tests/data/snapshot-releases/). A field present means that release or later; a field absent where
its place was read (a trace entry, the settings) means an earlier one. Fields that PyTorch
writes only sometimes (`forward_frames`, `device_free`) say nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

TOP, ENTRY, SETTINGS = "top level", "trace entry", "allocator settings"

# (field, where it is, the first release that always writes it), oldest first.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("external_annotations", TOP, "2.5"),
    ("compile_context", ENTRY, "2.8"),
    ("graph_capture_record_stream_reuse", SETTINGS, "2.9"),
    ("user_metadata", ENTRY, "2.10"),
    ("pool_id", ENTRY, "2.12"),
    ("max_cached_size", SETTINGS, "2.13"),
    ("host_segments", TOP, "2.14"),
)
OLDEST = "2.4"  # the oldest release hipmem drives (replay/pytorch/release.py): "or earlier"
_MAX_KEYS = 64  # keys looked at per place: a real one has at most a dozen
_MAX_KEY_CHARS = 64


@dataclass(frozen=True)
class ReleaseRange:
    """The releases (major.minor) that could have written a snapshot: `first` to `last`,
    None at an open end (`first` None: 2.4 or earlier; `last` None: or later)."""

    first: str | None
    last: str | None
    evidence: tuple[str, ...]  # what decided each end, as said: "user_metadata in its trace"

    def includes(self, version: str) -> bool:
        """Whether release `version` (`2.14.1`, `2.11.0+cu130`) lies in the range."""
        minor = _minor(version)
        if minor is None:
            return True  # a release hipmem cannot read is not said to be outside
        first = _minor(self.first or OLDEST)
        last = _minor(self.last) if self.last else None
        below = self.first is not None and first is not None and minor < first
        above = last is not None and minor > last
        return not (below or above)

    def said(self) -> str:
        """`PyTorch 2.10 or 2.11`, `PyTorch 2.13 or later`, `PyTorch 2.5 to 2.7`."""
        if self.first is None:
            return f"PyTorch {self.last} or earlier"
        if self.last is None:
            return f"PyTorch {self.first} or later"
        if self.first == self.last:
            return f"PyTorch {self.first}"
        joined = " or " if _next(self.first) == self.last else " to "
        return f"PyTorch {self.first}{joined}{self.last}"

    def sentence(self) -> str:
        """`its fields say PyTorch 2.10 or 2.11 wrote it (user_metadata in its trace, no
        pool_id)`."""
        return f"its fields say {self.said()} wrote it ({', '.join(self.evidence)})"

    def newest(self) -> str:
        """The newest release in the range (the one to replay with)."""
        return self.last or self.first or OLDEST

    def as_dict(self) -> dict[str, object]:
        return {"first": self.first, "last": self.last, "evidence": list(self.evidence)}


def written_by(
    top_keys: Iterable[object],
    settings_keys: Iterable[object] | None,
    entry_keys: Iterable[object] | None,
) -> ReleaseRange:
    """The range from the keys of the snapshot's top-level dict, of its `allocator_settings`
    (None: no settings dict) and of its first trace entry (None: no entry was read)."""
    places = {
        TOP: _names(top_keys),
        SETTINGS: None if settings_keys is None else _names(settings_keys),
        ENTRY: None if entry_keys is None else _names(entry_keys),
    }
    first: str | None = None
    last: str | None = None
    found_by = missed_by = ""
    for name, where, since in FIELDS:
        keys = places[where]
        if keys is None:
            continue  # the place was not read: its fields say nothing
        if name in keys:
            first, found_by = since, f"{name} in its {_place(where)}"
        elif last is None:
            last, missed_by = _previous(since), f"no {name}"
    if first is not None and last is not None and _order(last) < _order(first):
        last, missed_by = None, ""  # fields of no one release (edited by hand): say the floor
    evidence = tuple(e for e in (found_by, missed_by) if e)
    return ReleaseRange(first, last, evidence)


def snapshot_releases(
    data: dict[str, Any], first_keys: Iterable[Iterable[object] | None]
) -> ReleaseRange:
    """`written_by` of a snapshot's top-level dict, given the keys of each trace list's first
    entry (None for a list with no entry)."""
    settings = data.get("allocator_settings")
    entry_keys = next((keys for keys in first_keys if keys is not None), None)
    return written_by(data, settings if type(settings) is dict else None, entry_keys)


def _names(keys: Iterable[object]) -> frozenset[str]:
    names = []
    for k, key in enumerate(keys):
        if k >= _MAX_KEYS:
            break
        if type(key) is str and len(key) <= _MAX_KEY_CHARS:
            names.append(key)
    return frozenset(names)


def _place(where: str) -> str:
    return {TOP: "top level", ENTRY: "trace", SETTINGS: "allocator settings"}[where]


def _minor(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    try:
        release = Version(version).release
    except InvalidVersion:
        return None
    return (release[0], release[1] if len(release) > 1 else 0)


_ALL_MINORS = [f"2.{n}" for n in range(4, 15)]


def _order(release: str) -> int:
    return _ALL_MINORS.index(release)


def _previous(release: str) -> str:
    return _ALL_MINORS[_ALL_MINORS.index(release) - 1]


def _next(release: str) -> str | None:
    at = _ALL_MINORS.index(release)
    return _ALL_MINORS[at + 1] if at + 1 < len(_ALL_MINORS) else None


def outside_notes(recorded: Iterable[tuple[str, ReleaseRange | None]], version: str) -> list[str]:
    """One line for each snapshot file (`recorded`: each device's source, `run.pickle#dev0`,
    with its range) whose fields exclude release `version`, the one that replayed it."""
    notes: list[str] = []
    said: set[str] = set()
    for source, found in recorded:
        file = source.rpartition("#dev")[0] or source
        if found is None or file in said or found.includes(version):
            continue
        said.add(file)
        notes.append(
            f"{file}: {found.sentence()}, and PyTorch {version}'s allocator replayed it: "
            f"another release can answer differently (--torch {found.newest()})"
        )
    return notes
