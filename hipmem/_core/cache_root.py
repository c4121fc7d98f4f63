"""Where hipmem keeps what it downloads and builds: one user cache directory.

`HIPMEM_CACHE_DIR` overrides the platform's user cache (`~/.cache/hipmem` on Linux). Everything
hipmem caches (ROCm packages, the stand-in HIP runtime, the replay core) lives below it.
"""

from __future__ import annotations

import os
from pathlib import Path

from hipmem._core.errors import HipmemError

CACHE_ENV = "HIPMEM_CACHE_DIR"


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
        raise CacheUnusable(f"{CACHE_ENV}={root} is not a directory") from None
    except OSError as err:
        raise CacheUnusable(f"cache directory {root}: {err.strerror}") from None
    return root
