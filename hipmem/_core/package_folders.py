"""Where hipmem's packages are found: in an install, and in a checkout that Python finds first.

The parts live in top-level folders of the repository and install under `hipmem`
(`[tool.setuptools.package-dir]` in pyproject.toml, which `PARTS` repeats and a test holds
equal). An install knows that mapping, editable or not. A checkout does not, and Python finds
a checkout's `hipmem/` folder more often than one expects: it puts the working folder first on
`sys.path` for `python -c`, `python -m` and the REPL. So a user who ran `pip install .` in a
clone and then works in the clone's root imports the clone's `hipmem/`, and `hipmem.replay`
was not found there. `find_parts_beside` gives such a checkout's `hipmem` its three parts from
their folders, so the checkout imports as the install does; in an installed tree (the parts are
folders inside `hipmem/`) it does nothing.

A Python child process (the PyTorch replay worker) must import the hipmem its parent runs, not
whatever its working folder holds: `child_environment` says where to find it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

# Installed name -> the repository's folder (pyproject.toml's package-dir).
PARTS = {"hipmem.cli": "hipmem_cli", "hipmem.sizing": "sizing", "hipmem.replay": "replay"}


def hipmem_root() -> Path:
    """The folder that holds the running `hipmem` package: site-packages, or a checkout."""
    return Path(__file__).resolve().parents[2]


def find_parts_beside(package_folder: Path) -> None:
    """Let a checkout's `hipmem` (at `package_folder`) import its parts from their folders."""
    root = package_folder.parent
    if (package_folder / "replay").is_dir() or not (root / "pyproject.toml").is_file():
        return  # an installed tree: the parts are inside the package
    folders = {name: root / folder for name, folder in PARTS.items()}
    if not all((folder / "__init__.py").is_file() for folder in folders.values()):
        return
    if not any(isinstance(finder, _CheckoutParts) for finder in sys.meta_path):
        # First: an editable install of another checkout must not answer for this one.
        sys.meta_path.insert(0, _CheckoutParts(folders))


def child_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` for a Python child that imports hipmem: the running hipmem's folder first."""
    paths = [str(hipmem_root()), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


class _CheckoutParts(importlib.abc.MetaPathFinder):
    """Finds `hipmem.cli`, `hipmem.sizing` and `hipmem.replay` in a checkout's folders; their
    subpackages follow from the packages' own paths."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self._folders = folders

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        folder = self._folders.get(fullname)
        if folder is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
