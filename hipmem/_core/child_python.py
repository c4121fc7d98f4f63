"""A Python child process (the PyTorch replay worker) imports the hipmem its parent runs, not
whatever its working folder holds: `child_environment` says where to find it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def hipmem_root() -> Path:
    """The folder that holds the running `hipmem` package: site-packages, or a checkout."""
    return Path(__file__).resolve().parents[2]


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a Python child that imports hipmem: the running hipmem's folder first."""
    paths = [str(hipmem_root()), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}
