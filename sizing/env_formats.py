"""Environment settings written the way each consumer reads them.

    text = render("shell", [("ROCBLAS_DEVICE_MEMORY_SIZE", "4732160")])
    # export ROCBLAS_DEVICE_MEMORY_SIZE=4732160

Formats: `shell` (a file to `source`), `dotenv`, `json`, `yaml` (a Kubernetes container `env:`
list, values as strings as Kubernetes requires) and `github` (lines for `$GITHUB_ENV` and
`$GITHUB_OUTPUT`). Only fixed names are ever emitted, each with its own value grammar:

- the workspace sizes: digits (and the colons of PyTorch's `:SIZE:COUNT`), which need no
  quoting anywhere;
- PyTorch's allocator settings (PYTORCH_HIP_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF): the setting
  grammar of hipmem/_core/alloc_conf.py, letters, digits, `._:,` and the `[`, `]`, `>` of a
  per-range `roundup_power2_divisions`. `[` and `>` are shell syntax (a glob, a redirection),
  so `shell` and `dotenv` (which shells `source` too) write them in single quotes, which the
  grammar never contains; `github` must not quote (GitHub takes the value after `=` as it
  is), and YAML and JSON quote as their parsers read.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hipmem._core.alloc_conf import is_alloc_conf

from .errors import SizingError, SizingUsageError

FORMATS = ("shell", "dotenv", "json", "yaml", "github")
# The variables PyTorch reads its allocator settings from (replay/settings/recommend.py says
# which build reads which): values are setting strings, quoted where a shell would misread them.
ALLOC_CONF_NAMES = ("PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
NAMES = (
    "ROCBLAS_DEVICE_MEMORY_SIZE",
    "HIPBLAS_WORKSPACE_CONFIG",
    "ROCBLAS_WORKSPACE_CONFIG",
    "HIPBLASLT_WORKSPACE_SIZE",
    *ALLOC_CONF_NAMES,
)
_VALUE = re.compile(r"[0-9]+|(?::[0-9]+:[0-9]+)+")
GITHUB_FILES = ("GITHUB_ENV", "GITHUB_OUTPUT")


class UnknownFormat(SizingUsageError):
    """The output format is not one of FORMATS."""


class UnsafeVariable(SizingError):
    """A name or value outside the fixed set would have been emitted (a bug, never input)."""


class GithubFileError(SizingError):
    """$GITHUB_ENV or $GITHUB_OUTPUT could not be appended to."""


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str

    def __post_init__(self) -> None:
        if self.name in ALLOC_CONF_NAMES:
            safe = is_alloc_conf(self.value)
        else:
            safe = self.name in NAMES and _VALUE.fullmatch(self.value) is not None
        if not safe:
            raise UnsafeVariable(f"refusing to emit {self.name}={self.value!r}")

    @property
    def shell_value(self) -> str:
        """The value as a shell (or a dotenv file a shell may source) must read it."""
        return f"'{self.value}'" if self.name in ALLOC_CONF_NAMES else self.value


def check_format(name: str) -> str:
    """The format name, or a usage error listing the known ones."""
    if name not in FORMATS:
        raise UnknownFormat(
            f"unknown format; choose one of {', '.join(FORMATS)}", parameter="format", value=name
        )
    return name


_COMMENT = re.compile(r"[A-Za-z0-9 .,;:()_+-]*")


def render(
    fmt: str,
    variables: Iterable[tuple[str, str]],
    details: Mapping[str, Any] | None = None,
    comment: str | None = None,
) -> str:
    """The text for one format, ending in a newline; `details` go into `json` only, and
    `comment` (which release the figure is for) into `shell` and `dotenv` as a `#` line."""
    env = [EnvVar(name, value) for name, value in variables]
    check_format(fmt)
    if comment is not None and not _COMMENT.fullmatch(comment):
        raise UnsafeVariable(f"refusing to emit the comment {comment!r}")
    header = f"# {comment}\n" if comment and fmt in ("shell", "dotenv") else ""
    if fmt == "shell":
        return header + "".join(f"export {v.name}={v.shell_value}\n" for v in env)
    if fmt == "dotenv":
        return header + "".join(f"{v.name}={v.shell_value}\n" for v in env)
    if fmt == "github":  # GitHub reads what follows `=` to the end of the line, quotes and all
        return "".join(f"{v.name}={v.value}\n" for v in env)
    if fmt == "json":
        payload = {"env": {v.name: v.value for v in env}, **(details or {})}
        return json.dumps(payload, indent=2) + "\n"
    return _kubernetes_yaml(env)


class _Quoted(str):
    """A string PyYAML must write in double quotes."""


def _kubernetes_yaml(env: list[EnvVar]) -> str:
    # Imported here: PyYAML takes about 13 ms to import, and only this format needs it.
    import yaml

    class KubernetesDumper(yaml.SafeDumper):
        pass

    KubernetesDumper.add_representer(
        _Quoted, lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, '"')
    )
    # Always quoted: an unquoted 4732160 would be an int, which Kubernetes rejects for `value`.
    items = [{"name": v.name, "value": _Quoted(v.value)} for v in env]
    return yaml.dump({"env": items}, Dumper=KubernetesDumper, sort_keys=False)


def write_github(
    variables: Iterable[tuple[str, str]], environ: Mapping[str, str] | None = None
) -> list[Path]:
    """Append NAME=VALUE lines to $GITHUB_ENV and $GITHUB_OUTPUT, where set.

    Returns the files written (none when neither variable is set: print the lines instead).
    Both or neither: every file is opened before any is written, each gets its text in one
    write, and when a later file cannot be written the earlier ones are truncated back to
    their length before, so a failure leaves every file as it was.
    """
    environ = os.environ if environ is None else environ
    text = render("github", variables)
    targets = [(name, Path(environ[name])) for name in GITHUB_FILES if environ.get(name)]
    opened: list[tuple[str, Path, int]] = []
    written: list[tuple[int, int]] = []  # (fd, its size before)
    try:
        for name, path in targets:
            opened.append((name, path, _open_for_append(name, path)))
        for name, path, fd in opened:
            size_before = os.fstat(fd).st_size
            _append_whole(name, path, fd, text)
            written.append((fd, size_before))
    except GithubFileError:
        for fd, size_before in written:
            _truncate(fd, size_before)
        raise
    finally:
        for _, _, fd in opened:
            os.close(fd)
    return [path for _, path in targets]


def check_github_files(environ: Mapping[str, str] | None = None) -> None:
    """Refuse, before any work, a $GITHUB_ENV or $GITHUB_OUTPUT that cannot be appended to
    (a directory, a missing folder): opened for append and closed, nothing written."""
    environ = os.environ if environ is None else environ
    for name in GITHUB_FILES:
        if environ.get(name):
            os.close(_open_for_append(name, Path(environ[name])))


def _open_for_append(name: str, path: Path) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as err:
        raise GithubFileError(f"cannot append to ${name} ({path}): {err.strerror}") from None


def _append_whole(name: str, path: Path, fd: int, text: str) -> None:
    size_before = os.fstat(fd).st_size
    data = text.encode()
    if size_before and not _ends_with_newline(path):
        data = b"\n" + data  # a previous step left a partial line: do not glue onto it
    try:
        written = os.write(fd, data)
    except OSError as err:
        _truncate(fd, size_before)
        raise GithubFileError(f"cannot append to ${name} ({path}): {err.strerror}") from None
    if written != len(data):  # e.g. disk full: take back the partial lines
        _truncate(fd, size_before)
        raise GithubFileError(f"cannot append to ${name} ({path}): short write")


def _truncate(fd: int, size: int) -> None:
    with contextlib.suppress(OSError):  # not a regular file (a pipe): nothing to take back
        os.ftruncate(fd, size)


def _ends_with_newline(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"
    except OSError:
        return True  # unreadable (write-only): assume the runner's own well-formed lines
