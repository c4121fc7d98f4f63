"""Fetched trees checked against their manifests: on first use in a process, and by
`hipmem cache verify`.

A fetch records every file it unpacks with its size and SHA256 (the manifest: `fetch.py`,
`sizing/hipblaslt/fetch.py`). Reading a release's 400 MB to 1 GB again on every query would
cost seconds, so a file whose bytes were hashed and found as recorded is stamped in
`verified.json` beside the tree: its inode, size, change time (ctime) and modification time as
`stat` saw them just before the hash, and that hash. While a file's stamp is unchanged, its
bytes are the ones hashed: every write to a file sets its ctime to the current time, and nothing
a user runs can set it back (`touch` and `os.utime` set the modification time, and setting it
sets ctime to now too); a file replaced by another is another inode. So a use stats every
recorded file (microseconds each) and re-hashes only those whose stamp differs from what `stat`
says now, or whose stamped hash is not the manifest's. `hipmem cache verify` hashes every file
whatever its stamp.

Timestamps tick coarsely (the kernel's clock tick, a few milliseconds; whole seconds on some
file systems), so a write in the same tick as the change before it can keep the ctime. A file
changed less than `SETTLED_NS` before it was hashed is therefore not stamped (as git treats
"racily clean" files): it is hashed again on its next use, and stamped once it has settled.
So the first use of a freshly fetched tree hashes all of it (docs/cache.md says how long).

What a stamp cannot catch: someone who sets the system clock back before writing a file and
then edits `verified.json` to match (root, on purpose). A damaged or edited `verified.json`
costs only a re-hash: a stamp counts only when it equals what `stat` says now and names the
manifest's hash.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from hipmem._core.atomic_write import CannotWriteFile, write_text_atomically

from .apt import sha256

VERIFIED_NAME = "verified.json"
SETTLED_NS = 2_000_000_000  # coarser than any file system's timestamps (FAT's are 2 s)
_MAX_STAMPS_BYTES = 16 << 20  # a release's is about 150 KB; larger is not hipmem's: ignored
# Trees checked in this process: (root, the manifest's stamp) -> the damaged files then.
_CHECKED: dict[tuple[str, tuple[int, ...]], list[str]] = {}


def stamp_of(info: os.stat_result) -> list[int]:
    """What `stat` says of a file that changes with any write to it or any replacement."""
    return [info.st_ino, info.st_size, info.st_ctime_ns, info.st_mtime_ns]


def tree_damage(
    root: Path, files: dict[str, list[Any]], *, hashes: bool, rehash: bool = False
) -> list[str]:
    """The recorded files ([size, sha256, package, (skip start, end)] by path under `root`)
    that are missing, of another size, or (`hashes`) of another SHA256. What is read is what a
    query would load, through a link if one is there (a link to the same bytes is no damage);
    a repair never writes through one (`unpack`).

    With `hashes`, a file whose stamp still holds is not read again (module docstring), and
    every settled file found intact is stamped; `rehash` reads every file anyway (`hipmem
    cache verify`)."""
    recorded = read_stamps(root) if hashes else {}
    trusted = {} if rehash else recorded
    stamps: dict[str, list[Any]] = {}
    damaged = []
    base = f"{root}/"  # strings, not a Path per file: 650 of them on every use
    for relative, entry in files.items():
        size, digest, skip = entry[0], entry[1], entry[3:5]
        try:
            before_hash_ns = time.time_ns()
            info = os.stat(base + relative)  # noqa: PTH116
            whole = stat.S_ISREG(info.st_mode) and info.st_size == size
            stamp = [*stamp_of(info), digest]
            if whole and hashes and trusted.get(relative) != stamp:
                whole = sha256(root / relative, skip) == digest
        except (OSError, ValueError):  # ValueError: a name no file can have (NUL, "\ud800")
            whole = False
        if not whole:
            damaged.append(relative)
        elif hashes and before_hash_ns - info.st_ctime_ns >= SETTLED_NS:
            stamps[relative] = stamp
    if hashes and stamps != recorded:
        write_stamps(root, stamps)
    return damaged


def checked_on_use(root: Path, files: dict[str, list[Any]], manifest: Path) -> list[str]:
    """`tree_damage` with hashes, once per process and manifest: the locators ask for a
    release several times in one query; a fetch that repairs it writes a new manifest (another
    inode), which is checked again."""
    try:
        key = (str(root), tuple(stamp_of(manifest.stat())))
    except OSError:
        return tree_damage(root, files, hashes=True)
    if key not in _CHECKED:
        _CHECKED[key] = tree_damage(root, files, hashes=True)
    return list(_CHECKED[key])


def forget_checked() -> None:
    """Check every tree again on its next use, as a new process would."""
    _CHECKED.clear()


def read_stamps(root: Path) -> dict[str, list[Any]]:
    """The stamps kept beside `root` ({} when none, or unreadable: everything is hashed)."""
    path = root.parent / VERIFIED_NAME
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_STAMPS_BYTES:
            return {}
        data = json.loads(path.read_text())
        return {str(k): list(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError, AttributeError, RecursionError):
        return {}


def write_stamps(root: Path, stamps: dict[str, list[Any]]) -> None:
    """Replace the stamps in one step (a failure to write costs only a re-hash next time)."""
    with contextlib.suppress(OSError, CannotWriteFile):
        write_text_atomically(root.parent / VERIFIED_NAME, json.dumps(stamps))
