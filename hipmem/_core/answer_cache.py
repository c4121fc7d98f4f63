"""Answers of repeated queries: `size`, `recommend` and `check` of calls, kept and given again.

A CI job that gates several values asks the same questions on every run, and the answer cannot
change while everything it depends on is the same. So the command line's answer (its stdout,
stderr and exit code) is kept in `<cache>/answers/<key>.json`, the key a SHA256 over all of it:

- the command line as typed, the working folder, and the environment variables hipmem, ROCm
  and the terminal read (`_ENV_PREFIXES`);
- hipmem itself: the size and time of every source file (an edit is another key), and the
  time of the folders packages are installed in (`site.getsitepackages()`: a `pip install`
  or upgrade of hipmem or of what it imports adds or replaces files there);
- every file the command line names (call logs, workloads): its bytes;
- the libraries: the manifests of the cached ROCm releases and hipBLASLt builds (every
  library file's recorded size and SHA256), the records of the HIP stand-in builds, and
  where a local install could answer instead (`/opt/rocm/lib`, `$ROCM_PATH`, the loader's
  cache): their times.

Only answers given while none of that changed are kept (a query that fetched or built
something is asked again next time, and kept then: what a command itself can change, its named
files and the libraries, is looked at again after it ran), and only when both stdout and stderr
are piped (a terminal's output depends on its width and colours); snapshots, plots and
`--format github` (which writes files) are never answered from here. A hit prints the kept
output and exits with its code before typer, rich or any library is imported.

This module imports only the standard library: it runs before anything else is loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import site
import sys
from collections.abc import Mapping
from pathlib import Path

COMMANDS = ("size", "recommend", "check")
FORMAT = 1
_ENV_PREFIXES = ("HIPMEM_", "ROCM", "ROCBLAS", "ROCSOLVER", "HIPBLASLT", "HIP_", "HSA_",
                 "LD_", "PYTHON", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM",
                 "PYTORCH_", "CUDA_", "GITHUB_")  # fmt: skip
# Never answered from here: their answer reads a snapshot through PyTorch's allocator, or
# they write files besides printing.
_NEVER = ("--from-snapshot", "--plot", "github", "-h", "--help", "--debug")
# The packages whose files decide a sizing answer (their folders, subfolders included).
_SOURCE_PACKAGES = ("hipmem._core", "hipmem.cli", "hipmem.sizing")
_MAX_INPUT_BYTES = 64 << 20  # a named file larger than this is not hashed: not kept


def answers_dir(cache_root: Path) -> Path:
    return cache_root / "answers"


def key_for(
    argv: list[str],
    cache_root: Path,
    env: dict[str, str] | None = None,
    *,
    changeable: str | None = None,
) -> str | None:
    """The key of this command line's answer, or None when it is not kept. `changeable`:
    `changeable_state` of the same command line, when the caller has it already."""
    if not argv or argv[0] not in COMMANDS:
        return None
    if any(word == never or word.startswith(never + "=") or (never == "github" and
           "github" in word) for word in argv for never in _NEVER):  # fmt: skip
        return None
    environ = os.environ if env is None else env
    if changeable is None:
        changeable = changeable_state(argv, cache_root, environ)
    if changeable is None:
        return None
    digest = hashlib.sha256()
    _add(digest, "format", str(FORMAT), "argv", *argv, "cwd", str(Path.cwd()))
    for name in sorted(environ):
        if name.startswith(_ENV_PREFIXES):
            _add(digest, name, environ[name])
    if not _add_sources(digest):
        return None
    _add(digest, "changeable", changeable)
    return digest.hexdigest()


def changeable_state(
    argv: list[str], cache_root: Path, env: Mapping[str, str] | None = None
) -> str | None:
    """The part of the key a command can change while it runs: the files it names and the
    libraries (a fetch, a build). Looked at again after an answer: only an answer given while
    it stayed the same is kept. None: a named file too large to hash, not kept."""
    digest = hashlib.sha256()
    if not _add_inputs(digest, argv):
        return None
    _add_libraries(digest, cache_root, os.environ if env is None else env)
    return digest.hexdigest()


def lookup(cache_root: Path, key: str) -> tuple[str, str, int] | None:
    """(stdout, stderr, exit code) kept under `key`, or None."""
    try:
        data = json.loads((answers_dir(cache_root) / f"{key}.json").read_text())
        if data.get("format") != FORMAT:
            return None
        return str(data["stdout"]), str(data["stderr"]), int(data["code"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def store(cache_root: Path, key: str, stdout: str, stderr: str, code: int) -> None:
    """Keep an answer (replaced in one step; a failure to write is no failure of the query)."""
    from hipmem._core.atomic_write import CannotWriteFile, write_text_atomically

    payload = {"format": FORMAT, "stdout": stdout, "stderr": stderr, "code": code}
    with contextlib.suppress(OSError, CannotWriteFile):
        write_text_atomically(answers_dir(cache_root) / f"{key}.json", json.dumps(payload))


class Tee:
    """A text stream that writes through to another and keeps a copy of what was written.
    `failed`: a write or flush of the stream failed (a full disk): the answer is not kept,
    since it is no answer to the query but to that disk."""

    def __init__(self, stream: object) -> None:
        self._stream = stream
        self.kept: list[str] = []
        self.failed = False

    def write(self, text: str) -> int:
        self.kept.append(text)
        try:
            return self._stream.write(text)  # type: ignore[attr-defined]
        except OSError:
            self.failed = True
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except OSError:
            self.failed = True
            raise

    def text(self) -> str:
        return "".join(self.kept)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def piped() -> bool:
    return not (sys.stdout.isatty() or sys.stderr.isatty())


def _add(digest: hashlib._Hash, *parts: str) -> None:
    for part in parts:
        digest.update(part.encode(errors="surrogateescape") + b"\0")


def _add_sources(digest: hashlib._Hash) -> bool:
    # The folders packages are installed in: installing or upgrading one there (hipmem,
    # typer, rich, a library) adds or renames files in it, which changes its time. Cheaper
    # than asking importlib.metadata for versions (milliseconds a lookup), and it covers every
    # dependency. Not all of sys.path: its first entry is the script's or the working folder.
    for folder in _site_folders():
        with contextlib.suppress(OSError):
            info = Path(folder).stat()
            _add(digest, "site-folder", folder, str(info.st_mtime_ns), str(info.st_ino))
    for package in _SOURCE_PACKAGES:
        # Where the import system finds the package: the folders differ between a checkout
        # (sizing/) and an install (hipmem/sizing/), the files do not.
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return False
        try:
            _add_folder(digest, package, next(iter(spec.submodule_search_locations)), "")
        except OSError:
            return False
    return True


def _site_folders() -> list[str]:
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return folders


def _add_folder(digest: hashlib._Hash, package: str, folder: str, where: str) -> None:
    """The size and time of every file below `folder` (os.scandir: no Path per file)."""
    with os.scandir(folder) as entries:
        found = sorted(entries, key=lambda entry: entry.name)
    for entry in found:
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                _add_folder(digest, package, entry.path, f"{where}{entry.name}/")
        elif not entry.name.endswith(".pyc"):
            info = entry.stat()
            _add(digest, package, where + entry.name, str(info.st_size), str(info.st_mtime_ns))


def _add_inputs(digest: hashlib._Hash, argv: list[str]) -> bool:
    """Every word of the command line that names a file: its bytes."""
    for word in argv[1:]:
        value = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        if not value or value.startswith("-"):
            continue
        path = Path(value)
        try:
            if path.is_dir():  # --rocm-dir: a library added or replaced there changes this
                info = path.stat()
                _add(digest, "folder", value, str(info.st_mtime_ns), str(info.st_ino))
                continue
            if not path.is_file():
                continue
            if path.stat().st_size > _MAX_INPUT_BYTES:
                return False
            _add(digest, "input", value, hashlib.sha256(path.read_bytes()).hexdigest())
        except (OSError, ValueError):
            return False
    return True


def _add_libraries(digest: hashlib._Hash, cache_root: Path, env: Mapping[str, str]) -> None:
    for pattern in ("rocm/*/manifest.json", "hipblaslt/*/manifest.json", "shim/*/build.json",
                    "code-objects/*/build.json"):  # fmt: skip
        for path in sorted(cache_root.glob(pattern)):
            try:
                _add(digest, str(path), hashlib.sha256(path.read_bytes()).hexdigest())
            except OSError:
                _add(digest, str(path), "unreadable")
    places = ["/opt/rocm/lib", "/etc/ld.so.cache"]
    places += [f"{env[v]}/lib" for v in ("ROCM_PATH", "ROCM_HOME") if env.get(v)]
    places += [env["HIPMEM_ROCM_LIBDIR"]] if env.get("HIPMEM_ROCM_LIBDIR") else []
    places += [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    for place in places:
        try:
            info = Path(place).stat()
            _add(digest, place, str(info.st_mtime_ns), str(info.st_ino))
        except OSError:
            _add(digest, place, "absent")
