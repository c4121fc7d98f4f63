"""Unpacking a downloaded .deb into a cache tree: only the members a size query reads, never
through a link planted in the tree, never a link into the host's own system; the GPU code of
each library punched out of its disk blocks. Each regular file is recorded with its size and
SHA256 (the manifest's entries)."""

from __future__ import annotations

import ctypes
import fnmatch
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from ..errors import FetchError
from .apt import sha256
from .elf_file import section_range


def unpack(deb: Path, root: Path, patterns: list[str], package: str) -> dict[str, list[Any]]:
    """Extract the members matching `patterns`; returns each regular file's size and hash."""
    if root.is_symlink():
        root.unlink()  # planted: the tree is never written through a link out of the cache
    root.mkdir(parents=True, exist_ok=True)
    if shutil.which("dpkg-deb") is None:
        raise FetchError("unpacking needs dpkg-deb (package dpkg)")
    extracted: dict[str, list[Any]] = {}
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
            for member in archive:
                if any(matches(member.name, pattern) for pattern in patterns):
                    target = root / member.name
                    _clear_planted(root, member.name)
                    if member.issym() and target.is_symlink():
                        target.unlink()  # re-unpacking over an earlier tree
                    archive.extract(member, root, filter=_keep_links)
                    if member.isfile():
                        dropped = drop_gpu_code(target) if ".so" in target.name else None
                        relative = os.path.normpath(member.name)
                        entry = [member.size, sha256(target, dropped), package]
                        extracted[relative] = entry + (dropped or [])
    if proc.returncode != 0:
        raise FetchError(f"dpkg-deb could not read {deb} (delete it and run again)")
    return extracted


def _clear_planted(root: Path, name: str) -> None:
    """Remove a link found where the member or one of its folders goes: the tree's own links
    are the package's (recreated as it unpacks), so one there now was planted, and writing
    through it would leave the cache. Never followed, it does not stop a repair."""
    parts = [part for part in Path(os.path.normpath(name)).parts if part not in (".", "..")]
    inside = root.resolve()
    path = root
    for depth, part in enumerate(parts):
        path = path / part
        if not path.is_symlink():
            if not path.exists():
                return
            continue
        last = depth == len(parts) - 1
        if last or not path.resolve().is_relative_to(inside):
            path.unlink()  # a folder link within the tree is the package's own: kept


_FALLOC_FL_KEEP_SIZE = 1
_FALLOC_FL_PUNCH_HOLE = 2
_GPU_CODE_SECTION = ".hip_fatbin"


def drop_gpu_code(library: Path) -> list[int] | None:
    """Punch the GPU code (the `.hip_fatbin` section: 90% of rocBLAS, 97% of rocSOLVER) out of
    a library's disk blocks; returns the [start, end) byte range dropped, or None.

    Size queries never read it (the stand-in runtime registers code objects as no-ops), and
    the file keeps its size and layout, so the loader maps it as before: the dropped range
    reads as zeros and takes no disk. Where the filesystem cannot punch holes, nothing changes.
    """
    found = section_range(library, _GPU_CODE_SECTION)
    if found is None:
        return None
    page = 4096
    start = -(-found[0] // page) * page  # whole pages inside the section only
    end = (found[0] + found[1]) // page * page
    if end <= start:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    with library.open("r+b") as stream:
        mode = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
        if libc.fallocate(stream.fileno(), mode, start, end - start) != 0:
            return None  # e.g. EOPNOTSUPP: the library stays whole, which is only bigger
    return [start, end]


def matches(name: str, pattern: str) -> bool:
    """Glob match that never crosses a `/` (so `lib/*.so*` skips `lib/rocblas/x.so-gfx`),
    except a trailing `/**`, which takes the whole subtree."""
    if pattern.endswith("/**"):
        return name.startswith(pattern[:-2])
    directory, _, base = pattern.rpartition("/")
    name_directory, _, name_base = name.rpartition("/")
    return fnmatch.fnmatch(name_directory, directory) and fnmatch.fnmatch(name_base, base)


def _keep_links(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's 'data' filter (nothing lands outside `dest`), dropping absolute symlinks,
    which would point into the host's own system; the libraries' own links are relative.
    Files keep the umask's permissions (a cache shared by a team stays readable)."""
    if member.issym() and member.linkname.startswith("/"):
        return None
    return tarfile.data_filter(member, dest)
