"""Where hipmem keeps what it downloads and builds: one user cache directory.

`HIPMEM_CACHE_DIR` overrides the platform's user cache (`~/.cache/hipmem` on Linux).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

CACHE_ENV = "HIPMEM_CACHE_DIR"


def cache_dir() -> Path:
    """The cache root; created on first use."""
    override = os.environ.get(CACHE_ENV)
    root = Path(override) if override else Path(platformdirs.user_cache_dir("hipmem"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as tmp:
            tmp.write(text)
        Path(tmp_name).chmod(0o666 & ~_umask())  # mkstemp makes 0600: follow the umask instead
        Path(tmp_name).replace(path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
