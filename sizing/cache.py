"""Where hipmem keeps what it downloads and builds: one user cache directory.

`HIPMEM_CACHE_DIR` overrides the platform's user cache (`~/.cache/hipmem` on Linux).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

from sizing.errors import SizingError

CACHE_ENV = "HIPMEM_CACHE_DIR"


class CacheDirError(SizingError):
    """The cache folder cannot be created or used (e.g. HIPMEM_CACHE_DIR names a file)."""


def cache_dir() -> Path:
    """The cache root; created on first use. Raises CacheDirError."""
    override = os.environ.get(CACHE_ENV)
    root = Path(override) if override else Path(platformdirs.user_cache_dir("hipmem"))
    named = f"{CACHE_ENV}={root}" if override else f"the cache folder {root}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CacheDirError(
            f"{named} is a file, not a folder; point {CACHE_ENV} at a folder"
        ) from None
    except OSError as err:
        raise CacheDirError(f"{named}: cannot create it: {err.strerror or err}") from None
    return root


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as tmp:
            tmp.write(text)
        Path(tmp_name).replace(path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
