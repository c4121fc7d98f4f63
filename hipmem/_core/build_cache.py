"""Native code hipmem builds on first use: kept in the cache, checked on every use, healed.

A build is a folder of the cache (`<cache>/vcuda/<key>`, `shim/<key>`, `replay-core/<key>`,
`code-objects/<key>`), its name a hash of what it is built from. `built_folder` makes it in a
temporary folder beside it (the caller's `make` writes the files), records every file's size
and SHA256 (a link: its target) in `BUILD_MANIFEST`, and renames the folder into place, so a
reader sees a whole build or none. On every use the record is checked against the folder: an
`lstat` (a regular file, never a link planted in its place, of the recorded size) and the hash
(the builds are at most a few hundred KB: well under a millisecond). A damaged build (a file
truncated, replaced or missing; the record itself cut short) is said in one line and built
again; nothing is ever loaded or run from a build that fails the check.

Concurrent processes on one cache (a fleet's workers) build once: the builder holds
`.<key>.lock` beside the folder; the others wait for it, then find the build whole.

A build that takes long (`announced=True`: a C++ compile against PyTorch's or RMM's headers,
a minute or two on a shared 2-core machine) is said in one line before it starts, through the
callback the front end gave `announce_builds` (the CLI's status line); the library itself says
nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from hipmem._core.atomic_write import naming_write_errors, umask

BUILD_MANIFEST = "build.json"
BUILD_FORMAT = 1
Notice = Callable[[str], None]


def _warn(line: str) -> None:
    # The libraries never import the CLI: the line is written as the CLI writes a warning.
    sys.stderr.write(f"Warning: {line}\n")


_announcer: list[Notice] = []  # set by the front end (announce_builds); none: silent


def announce_builds(say: Notice) -> None:
    """Say each long build (`built_folder(..., announced=True)`) through `say` before it."""
    _announcer[:] = [say]


def built_folder(
    out_dir: Path,
    make: Callable[[Path], None],
    *,
    what: str,
    notice: Notice | None = None,
    announced: bool = False,
) -> Path:
    """`out_dir`, built by `make(work_dir)` when missing, rebuilt (saying so) when damaged.

    `what` names the build in that line ("the virtual GPU of PyTorch 2.11.0").
    `make` raises to fail the build; nothing of a failed build stays. `announced`: a long
    build, said before it starts (`announce_builds`)."""
    damage = folder_damage(out_dir)
    if damage is None:
        return out_dir
    with _build_lock(out_dir):
        damage = folder_damage(out_dir)  # another process may have built it meanwhile
        if damage is None:
            return out_dir
        if damage != "missing":
            (notice or _warn)(f"{what} in {out_dir} is damaged ({damage}); building it again")
        elif announced and _announcer:
            _announcer[0](f"building {what}, once: the cache keeps it ({out_dir})")
        _build(out_dir, make)
    return out_dir


def folder_damage(folder: Path) -> str | None:
    """None when `folder` is a whole build as recorded; else what is wrong, in a few words
    ("missing", "libcudart.so.13 truncated", ...)."""
    record = read_record(folder)
    if record is None:
        if not os.path.lexists(folder / BUILD_MANIFEST):
            return "missing"  # never built, or built by a hipmem that kept no record: built quietly
        return f"{BUILD_MANIFEST} unreadable"
    for name, entry in record.items():
        problem = entry_damage(folder / name, entry)
        if problem is not None:
            return f"{name} {problem}"
    return None


def entry_damage(path: Path, entry: list[object]) -> str | None:
    """What is wrong with one recorded file or link, or None."""
    try:
        info = path.lstat()
    except OSError:
        return "missing"
    if entry[0] == "link":
        if not stat.S_ISLNK(info.st_mode) or str(path.readlink()) != entry[1]:
            return "changed"
        return None
    if not stat.S_ISREG(info.st_mode):
        return "replaced by a link or folder"
    if info.st_size != entry[0]:
        return "truncated" if info.st_size < int(str(entry[0])) else "changed"
    if info.st_size and file_sha256(path) != entry[1]:  # an empty file's hash is known
        return "changed"
    return None


def read_record(folder: Path) -> dict[str, list[object]] | None:
    """The build's record (file name -> [size, sha256] or ["link", target]), or None."""
    manifest = folder / BUILD_MANIFEST
    try:
        if not stat.S_ISREG(manifest.lstat().st_mode):
            return None
        data = json.loads(manifest.read_text())
        if data.get("format") != BUILD_FORMAT or not isinstance(data.get("files"), dict):
            return None
        files = {str(k): list(v) for k, v in data["files"].items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if not files or any(len(v) != 2 or "/" in k or k.startswith(".") for k, v in files.items()):
        return None
    return files


def record_folder(folder: Path) -> dict[str, list[object]]:
    """Every file and link directly in `folder`, as `read_record` returns them."""
    files: dict[str, list[object]] = {}
    for path in sorted(folder.iterdir()):
        if path.name == BUILD_MANIFEST:
            continue
        if path.is_symlink():
            files[path.name] = ["link", str(path.readlink())]
        elif path.is_file():
            files[path.name] = [path.stat().st_size, file_sha256(path)]
    return files


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 16):  # small: a first snapshot read pays for it
            digest.update(chunk)
    return digest.hexdigest()


def folder_bytes(folder: Path) -> int:
    """What a build takes on disk."""
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                total += info.st_blocks * 512
    return total


def _build(out_dir: Path, make: Callable[[Path], None]) -> None:
    with naming_write_errors(out_dir):  # a full disk names the build, not an internal error
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=".build-"))
    try:
        make(work)
        with naming_write_errors(out_dir):
            files = record_folder(work)
            manifest = {"format": BUILD_FORMAT, "files": files}
            (work / BUILD_MANIFEST).write_text(json.dumps(manifest, indent=1))
            work.chmod(0o777 & ~umask())  # mkdtemp makes 0700: a shared cache follows the umask
            if os.path.lexists(out_dir):  # damaged: moved aside in one step, then removed
                aside = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=".damaged-"))
                out_dir.replace(aside / "build")
                shutil.rmtree(aside, ignore_errors=True)
            work.rename(out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _build_lock(out_dir: Path) -> Iterator[None]:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with (out_dir.parent / f".{out_dir.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
