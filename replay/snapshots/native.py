"""The restricted snapshot pickle machine in C (`replay/snapshots/csrc/`, its files named in
reader.h), built when hipmem is installed.

`pickle_machine.RestrictedPickle` (Python) is the reference; this is the same machine and the
same trace sink in C, a plain CPython extension module (`_snapshot_reader`) that setuptools
builds at install time (setup.py) and this module imports with its package, as `pickle`
imports `_pickle`: nothing is built, looked up or checked when a snapshot is read (in a
checkout, `pip install -e .` builds it in place, and again after the C source changes). Both give
the same columns, skipped entries and messages (tests/replay/snapshots/test_snapshot_native.py);
the C one in about the time of a plain `pickle.load` of the file (docs/benchmarks.md).

Where the install had no C compiler or no Python headers, setuptools leaves the extension
out (it is optional) and snapshots are read by the Python machine: the answers are the same,
only slower, so nothing is said. `HIPMEM_SNAPSHOT_READER=python` chooses the Python machine;
`=native` requires the C one (a `NativeReaderUnavailable` saying it was not built at install
and how to get it, rather than the quiet fallback).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..errors import ReplayError, ReplayUsageError
from ..logs.events import ALLOCATE, ALLOCATE_FAILURE, FREE
from . import pickle_machine as snapshot_pickle
from .pickle_machine import DROPPED, BigInt, RestrictedPickle, SnapshotError, excerpt
from .segments import DeviceSegments, device_segments

try:
    from . import _snapshot_reader as _native
except ImportError:  # installed without a C compiler or Python's headers
    _native_module: ModuleType | None = None
else:
    _native_module = _native

READER_ENV = "HIPMEM_SNAPSHOT_READER"  # "python" or "native"; unset: native when it was built


class NativeReaderUnavailable(ReplayError):
    """The C snapshot reader was not built when hipmem was installed (the message says how)."""


def load() -> ModuleType:
    """The C machine's module, imported with this package; an error when it was not built."""
    if _native_module is None:
        raise NativeReaderUnavailable(
            "the C snapshot reader was not built when hipmem was installed (it needs a C "
            "compiler and the python3-dev headers then): install them and reinstall hipmem "
            "(pip install --force-reinstall --no-deps hipmem, or pip install -e . in a checkout)"
        )
    return _native_module


def restricted_pickle() -> type[RestrictedPickle]:
    """The machine that reads snapshots here: the C one, else the Python reference."""
    choice = os.environ.get(READER_ENV, "").strip().lower()
    if not choice:
        return RestrictedPickle if _native_module is None else NativeRestrictedPickle
    if choice == "python":
        return RestrictedPickle
    if choice == "native":
        load()  # raises, saying how to get it
        return NativeRestrictedPickle
    raise ReplayUsageError("expected 'python' or 'native'", parameter=READER_ENV, value=choice)


def device_segments_of(
    machine: RestrictedPickle,
) -> Callable[[Any, int, int], dict[int, DeviceSegments] | None]:
    """The walk of the segments that goes with the machine: in C after the C machine."""
    native = isinstance(machine, NativeRestrictedPickle)
    return load().device_segments if native else device_segments


# What the C machine takes from the Python one: its markers, errors and bounds.
_CONSTS = (
    DROPPED,
    BigInt,
    excerpt,
    snapshot_pickle._Truncated,
    SnapshotError,
    (ALLOCATE, FREE, ALLOCATE_FAILURE),
    snapshot_pickle._CHUNK_BYTES,
    snapshot_pickle._MAX_CHUNK_BYTES,
    snapshot_pickle._LOOKAHEAD,
    snapshot_pickle._MAX_MARKS,
    snapshot_pickle._MEMO_GAP,
    snapshot_pickle._LONG_DECODED_BYTES,
)


class NativeRestrictedPickle(RestrictedPickle):
    """`RestrictedPickle` with its loop in C: same arguments, sinks, results and messages."""

    def _run(self) -> Any:
        # The sink's own limits are read from its `shared.sink_limits` (trace_sink.py).
        return load().run(
            self,
            self._read,
            self._max_bytes,
            self._max_cells,
            self._new_sink,
            self._keep_frames,
            self.sinks,
            _CONSTS,
        )
