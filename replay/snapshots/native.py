"""The restricted snapshot pickle machine in C (`replay/snapshots/csrc/snapshot_reader.c`),
built on use.

`snapshot_pickle.RestrictedPickle` (Python) is the reference; this is the same machine and the
same trace sink in C, a CPython extension module built with the system C compiler against the
running Python's headers into hipmem's cache (`<cache>/replay-core/snapshot-reader-<key>`),
checked on every load and rebuilt when damaged (`hipmem._core.build_cache`). Both give the
same columns, skipped entries and messages
(tests/replay/snapshots/test_snapshot_native.py); the C one in about the time of a plain
`pickle.load` of the file (docs/benchmarks.md).

Where no C compiler or no Python headers exist (or the build fails), snapshots are read by
the Python machine: the answers are the same, only slower, so nothing is said.
`HIPMEM_SNAPSHOT_READER=python` chooses the Python machine; `=native` requires the C one (a
`NativeReaderUnavailable` naming what is missing, rather than the quiet fallback).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from hipmem._core.build_cache import built_folder
from hipmem._core.cache_root import cache_dir
from hipmem._core.native_build import compile_step, find_compiler

from ..errors import ReplayError
from ..logs.events import ALLOCATE, ALLOCATE_FAILURE, FREE
from . import pickle_machine as snapshot_pickle
from .pickle_machine import DROPPED, BigInt, RestrictedPickle, SnapshotError, excerpt

SOURCE = Path(__file__).with_name("csrc") / "snapshot_reader.c"
MODULE_NAME = "_snapshot_reader"
READER_ENV = "HIPMEM_SNAPSHOT_READER"  # "python" or "native"; unset: native when it builds


class NativeReaderUnavailable(ReplayError):
    """The C snapshot reader cannot be built or loaded here (the message says why)."""


def _build_command(source: Path, target: Path) -> list[str]:
    compiler = find_compiler(
        "CC", needed_by="the C snapshot reader is built on first use", error=NativeReaderUnavailable
    )
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise NativeReaderUnavailable(
            f"no Python headers ({include}/Python.h) to build the snapshot reader: install "
            "the python3-dev package of this Python"
        )
    return [compiler, "-O2", "-fPIC", "-shared", f"-I{include}", str(source), "-o", str(target)]


def _library_name() -> str:
    return MODULE_NAME + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def build() -> Path:
    """The built extension module (built once per source and Python; checked)."""
    # Keyed by the source and the Python it is built for (its ABI), as the other builds are
    # keyed by what they are built against, not by the compiler: finding the compiler and the
    # headers waits until a build is needed (every first read pays for the key).
    try:
        source = SOURCE.read_bytes()
    except OSError as err:
        raise NativeReaderUnavailable(f"no snapshot reader source ({err})") from None
    digest = hashlib.sha256()
    digest.update(source)
    digest.update(f"{sys.version} {sys.executable}".encode())
    folder = cache_dir() / "replay-core" / f"snapshot-reader-{digest.hexdigest()[:16]}"

    def make(work: Path) -> None:
        command = _build_command(SOURCE, work / _library_name())
        compile_step(command, what="the C snapshot reader", error=NativeReaderUnavailable)

    built_folder(folder, make, what="the C snapshot reader")
    return folder / _library_name()


@cache
def load() -> ModuleType:
    """The C machine's module: built (once, cached), checked and imported."""
    path = build()
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
    if spec is None:
        raise NativeReaderUnavailable(f"cannot load the snapshot reader {path}")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as err:
        raise NativeReaderUnavailable(f"cannot load the snapshot reader {path}: {err}") from None
    return module


@cache
def _native_or_none() -> ModuleType | None:
    try:
        return load()
    except NativeReaderUnavailable:
        return None


def restricted_pickle() -> type[RestrictedPickle]:
    """The machine that reads snapshots here: the C one, else the Python reference."""
    choice = os.environ.get(READER_ENV, "").strip().lower()
    if choice == "python":
        return RestrictedPickle
    if choice == "native":
        load()  # raises, naming what is missing
        return NativeRestrictedPickle
    if choice:
        raise NativeReaderUnavailable(f"{READER_ENV}={choice!r}: expected 'python' or 'native'")
    return NativeRestrictedPickle if _native_or_none() is not None else RestrictedPickle


class NativeRestrictedPickle(RestrictedPickle):
    """`RestrictedPickle` with its loop in C: same arguments, sinks, results and messages."""

    def _run(self) -> Any:
        # The sink's own limits are read from its `shared.sink_limits` (snapshot.py).
        p = snapshot_pickle
        consts = (
            DROPPED,
            BigInt,
            excerpt,
            p._Truncated,
            SnapshotError,
            (ALLOCATE, FREE, ALLOCATE_FAILURE),
            p._CHUNK_BYTES,
            p._MAX_CHUNK_BYTES,
            p._LOOKAHEAD,
            p._MAX_MARKS,
            p._MEMO_GAP,
            p._LONG_DECODED_BYTES,
        )
        return load().run(
            self,
            self._read,
            self._max_bytes,
            self._max_cells,
            self._new_sink,
            self._keep_frames,
            self.sinks,
            consts,
        )
