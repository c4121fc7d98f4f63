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
  library file's recorded size and SHA256) and the stamp of every file they record (inode,
  size, change and modification times: a library edited after an answer was kept is another
  key, and the query that answers it checks the library's hashes), the records of the HIP
  stand-in builds, and where a local install could answer instead (`/opt/rocm/lib`,
  `$ROCM_PATH`, the loader's cache): their times.

Only answers given while none of that changed are kept (a query that fetched or built
something is asked again next time, and kept then: what a command itself can change, its named
files and the libraries, is looked at again after it ran), and only when both stdout and stderr
are piped (a terminal's output depends on its width and colours); snapshots, plots and
`--format github` (which writes files) are never answered from here. A hit prints the kept
output and exits with its code before typer, rich or any library is imported.

A kept answer is checked on every use: its file holds, besides the answer, the key it was kept
under, the changeable state it was computed from (`changeable_state`) and a SHA256 over all of
them (`FORMAT` 2). An entry whose digest does not hold (edited, cut short), that was moved under
another key's name, or that was computed from other libraries raises `DamagedAnswer`: the
caller says so in one line, drops it and answers again. The digest catches damage and hand
edits, not a forger who recomputes it: one who can write the cache can as well replace the
libraries and their manifests. `hipmem cache verify` checks every entry the same way
(`entry_damage`).

This module imports only the standard library: it runs before anything else is loaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import site
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

COMMANDS = ("size", "recommend", "check")
KEPT_CODES = (0, 1)  # the exit codes of answers kept: done, or a check that does not pass
FORMAT = 2  # 2: the key, the changeable state and the digest kept beside the answer
_ENV_PREFIXES = ("HIPMEM_", "ROCM", "ROCBLAS", "ROCSOLVER", "HIPBLASLT", "HIP_", "HSA_",
                 "LD_", "PYTHON", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM",
                 "PYTORCH_", "CUDA_", "GITHUB_")  # fmt: skip
# Never answered from here: their answer reads a snapshot through PyTorch's allocator, or
# they write files besides printing.
_NEVER = ("--from-snapshot", "--plot", "github", "-h", "--help", "--debug")
# The packages whose files decide a sizing answer (their folders, subfolders included).
_SOURCE_PACKAGES = ("hipmem._core", "hipmem.cli", "hipmem.sizing")
_MAX_INPUT_BYTES = 64 << 20  # a named file larger than this is not hashed: not kept
_MAX_ANSWER_BYTES = 64 << 20  # a kept answer larger than this is not read: damaged
_MAX_MANIFEST_BYTES = 16 << 20  # as sizing.rocm.fetch.MAX_MANIFEST_BYTES


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


class DamagedAnswer(Exception):
    """A kept answer that fails its check: `path`, and `why` in a few words."""

    def __init__(self, path: Path, why: str) -> None:
        self.path, self.why = path, why
        super().__init__(f"the kept answer {path} {why}; dropped it, answering again")


def lookup(cache_root: Path, key: str, changeable: str) -> tuple[str, str, int] | None:
    """(stdout, stderr, exit code) kept under `key`, or None when none is. Raises
    `DamagedAnswer` when one is kept there but fails its check, or was computed from another
    `changeable` state (the libraries, the named files) than this command line's."""
    path = answers_dir(cache_root) / f"{key}.json"
    if not os.path.lexists(path):
        return None
    kept = read_entry(path)
    if kept["changeable"] != changeable:
        raise DamagedAnswer(path, "was computed from other libraries or files")
    return kept["stdout"], kept["stderr"], kept["code"]


def read_entry(path: Path) -> dict[str, Any]:
    """A kept answer's fields, once its digest holds and it is kept under its own key (the
    file's name); raises `DamagedAnswer` otherwise."""
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):  # a link or a device planted here is never read
            raise DamagedAnswer(path, "is not a regular file")
        if info.st_size > _MAX_ANSWER_BYTES:
            raise DamagedAnswer(path, "is larger than any answer")
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise DamagedAnswer(path, "cannot be read") from err
    fields = {"key": str, "changeable": str, "stdout": str, "stderr": str, "code": int,
              "digest": str}  # fmt: skip
    if not (isinstance(data, dict) and data.get("format") == FORMAT and all(
            type(data.get(name)) is kind for name, kind in fields.items())
            and data["code"] in KEPT_CODES):  # fmt: skip
        raise DamagedAnswer(path, "is not an answer hipmem keeps")
    if data["digest"] != _digest(data):
        raise DamagedAnswer(path, "does not match its digest: edited or damaged")
    if data["key"] != path.stem:
        raise DamagedAnswer(path, "is kept under another command line's key: moved or copied")
    return data


def entry_damage(path: Path) -> str | None:
    """What is wrong with a kept answer's file on its own (`hipmem cache verify`), or None."""
    try:
        read_entry(path)
    except DamagedAnswer as damaged:
        return damaged.why
    return None


def drop(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def store(cache_root: Path, key: str, changeable: str, stdout: str, stderr: str, code: int) -> None:
    """Keep an answer (replaced in one step; a failure to write is no failure of the query)."""
    from hipmem._core.atomic_write import CannotWriteFile, write_text_atomically

    payload: dict[str, Any] = {"format": FORMAT, "key": key, "changeable": changeable,
                               "code": code, "stdout": stdout, "stderr": stderr}  # fmt: skip
    payload["digest"] = _digest(payload)
    with contextlib.suppress(OSError, CannotWriteFile):
        write_text_atomically(answers_dir(cache_root) / f"{key}.json", json.dumps(payload))


def _digest(entry: dict[str, Any]) -> str:
    """SHA256 over what a kept answer says and what it was computed from."""
    digest = hashlib.sha256()
    _add(digest, "answer", str(FORMAT), entry["key"], entry["changeable"], str(entry["code"]),
         entry["stdout"], entry["stderr"])  # fmt: skip
    return digest.hexdigest()


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
    # surrogatepass: every str encodes, one for one (an undecodable byte of a file name, a
    # lone "\ud800" in an edited answer file) and none raises.
    for part in parts:
        digest.update(part.encode(errors="surrogatepass") + b"\0")


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
    for pattern in ("rocm/*/manifest.json", "hipblaslt/*/manifest.json"):
        for path in sorted(cache_root.glob(pattern)):
            _add_fetched_tree(digest, path)
    for pattern in ("shim/*/build.json", "code-objects/*/build.json"):
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


def _add_fetched_tree(digest: hashlib._Hash, manifest: Path) -> None:
    """A fetched tree: its manifest (every file's recorded SHA256) and the stamp of every file
    it records (as `sizing.rocm.tree_check` stamps them: inode, size, change and modification
    times), so that a library written after an answer was kept is another key. os.stat on
    joined strings: a few microseconds a file, 650 files in a ROCm release."""
    try:
        info = manifest.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_MANIFEST_BYTES:
            raise ValueError("not a manifest hipmem writes")
        data = manifest.read_bytes()
        files = json.loads(data)["files"]
        _add(digest, str(manifest), hashlib.sha256(data).hexdigest())
        root = f"{manifest.parent}/root/"
        stamps = []
        for relative in files:
            try:
                info = os.stat(root + relative)  # noqa: PTH116 (no Path per file: speed)
                stamps.append(f"{relative}\0{info.st_ino}\0{info.st_size}\0{info.st_ctime_ns}"
                              f"\0{info.st_mtime_ns}\0")  # fmt: skip
            except OSError:
                stamps.append(f"{relative}\0absent\0")
        digest.update("".join(stamps).encode(errors="surrogatepass"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        _add(digest, str(manifest), "unreadable")
