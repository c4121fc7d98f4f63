"""The package as it installs (`hipmem/` with `cli`, `sizing` and `replay` inside), made of
symbolic links to the checkout's folders, for the tools that read files rather than import:
mypy and grimp. The repository itself has no links: each file has one path, and the parts
map into `hipmem` only through setuptools' package-dir (see docs/architecture.md).

The folders come from the import system (the editable install's finder), so the view is
what `import hipmem.replay` loads, wherever the checkout is.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PARTS = ("cli", "sizing", "replay")


def folder_of(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def build_view(where: Path) -> Path:
    """`where/hipmem`, linking each entry of the `hipmem` folder and each part; returns `where`."""
    package = where / "hipmem"
    package.mkdir(parents=True, exist_ok=True)
    top = folder_of("hipmem")
    for entry in top.iterdir():
        if entry.name != "__pycache__":
            _link(package / entry.name, entry)
    for part in PARTS:
        _link(package / part, folder_of(f"hipmem.{part}"))
    return where


def real_path(text: str, where: Path) -> str:
    """`text` with the view's paths written as the checkout's files they link to."""
    view = str(where / "hipmem") + "/"
    for entry in sorted((where / "hipmem").iterdir(), key=lambda p: -len(p.name)):
        text = text.replace(f"{view}{entry.name}", str(entry.resolve()))
    return text


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=target.is_dir())
