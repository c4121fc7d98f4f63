"""Which files a log is: the paths a user gives, and rmm's per-device `<name>.dev<N>.csv`."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from hipmem._core.errors import shown_value

from ..errors import ReplayUsageError

_DEVICE_NAME = re.compile(r"\.dev(\d+)\.csv(\.gz)?$")


class LogFileNotFoundError(ReplayUsageError):
    """A log path given on the command line does not exist."""


def device_of(path: str | Path) -> int | None:
    """The device number in rmm's `<name>.dev<N>.csv` naming, else None."""
    match = _DEVICE_NAME.search(Path(path).name)
    return int(match.group(1)) if match else None


def find_log_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Resolve the paths a user gave: each existing file as is; a missing `<name>.csv[.gz]`
    whose per-device siblings `<name>.dev<N>.csv[.gz]` exist stands for those, by device."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        try:
            if path.is_file():
                found.append(path)
                continue
            if path.exists():  # a FIFO or a device (/dev/zero): say what it is
                raise LogFileNotFoundError(f"{given}: {_not_a_file(path)}")
        except OSError as err:  # a name the system refuses (longer than 255 bytes), a loop
            shown = shown_value(str(given))
            raise LogFileNotFoundError(f"log file {shown}: {err.strerror or err}") from None
        siblings = _device_siblings(path)
        if not siblings:
            raise LogFileNotFoundError(f"log file '{given}' does not exist")
        found.extend(siblings)
    return found


def _not_a_file(path: Path) -> str:
    mode = path.stat().st_mode
    if stat.S_ISFIFO(mode):
        return "is a FIFO; allocation logs are read twice when damaged, save it to a file first"
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISCHR: "a character device"}
    what = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
    return f"is {what}, not a log file" if what.startswith("a ") else f"is {what}"


def _device_siblings(path: Path) -> list[Path]:
    name = path.name
    for suffix in (".csv.gz", ".csv"):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            candidates = list(path.parent.glob(f"{glob_escape(stem)}.dev*{suffix}"))
            numbered = [(device_of(p), p) for p in candidates if p.name.endswith(suffix)]
            return [p for dev, p in sorted((d, p) for d, p in numbered if d is not None)]
    return []


def glob_escape(text: str) -> str:
    """Escape glob metacharacters in a literal file-name part."""
    return re.sub(r"([*?\[])", r"[\1]", text)
