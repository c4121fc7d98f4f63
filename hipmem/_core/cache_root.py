"""Where hipmem keeps what it downloads and builds: one user cache directory.

`HIPMEM_CACHE_DIR` overrides the platform's user cache (`~/.cache/hipmem` on Linux, or
`$XDG_CACHE_HOME/hipmem` where that is set). Everything hipmem caches (ROCm packages, the
stand-in HIP runtime, the replay core) lives below it. A folder that cannot be made is said
naming the variable the user set (or HOME's default), the folder, and what is in the way.
"""

from __future__ import annotations

import os
from pathlib import Path

from hipmem._core.errors import HipmemError

CACHE_ENV = "HIPMEM_CACHE_DIR"
# platformdirs reads it: named here only to say where a cache folder came from.
_XDG_CACHE_ENV = "XDG_CACHE_HOME"
_ELSEWHERE = f"{CACHE_ENV} sets another"


class CacheUnusable(HipmemError):
    """The cache directory cannot be created or is not a directory."""


def cache_dir() -> Path:
    """The cache root; created on first use (with the user's umask, so a team can share it)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        root = Path(override)
    else:  # imported here: a GPU machine without it can still name the cache (CACHE_ENV)
        import platformdirs

        root = Path(platformdirs.user_cache_dir("hipmem"))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise CacheUnusable(_not_a_folder(root)) from None
    except OSError as err:
        raise CacheUnusable(f"{_source(root)}: cannot make {root}: {err.strerror}") from None
    return root


def _source(root: Path) -> str:
    """Where `root` came from, as the user set it: `HIPMEM_CACHE_DIR=...`,
    `XDG_CACHE_HOME=...`, or HOME's default folder."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return f"{CACHE_ENV}={override}"
    xdg = os.environ.get(_XDG_CACHE_ENV, "")
    if xdg.strip() and root.parent == Path(xdg).expanduser():
        return f"{_XDG_CACHE_ENV}={xdg} (the cache is $XDG_CACHE_HOME/hipmem; {_ELSEWHERE})"
    return f"the cache folder {root} (HOME's ~/.cache/hipmem; {_ELSEWHERE})"


def _not_a_folder(root: Path) -> str:
    culprit = _in_the_way(root)
    if culprit == root and os.environ.get(CACHE_ENV):  # the folder the user named itself
        return f"{CACHE_ENV}={root} is not a directory"
    return f"{_source(root)}: {culprit} is not a directory"


def _in_the_way(root: Path) -> Path:
    """The first folder of `root`, from the top, that exists and is not a folder."""
    for folder in (*reversed(root.parents), root):
        if folder.exists() and not folder.is_dir():
            return folder
    return root
